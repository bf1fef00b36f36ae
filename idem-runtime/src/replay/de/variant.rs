//! Enum variants: read as the type's enum asks (`deserialize_enum`), or, without a type's
//! guidance (`deserialize_any`), as JSON shows them: `{name: content}`.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, Visitor};

use super::Decoder;
use crate::replay::format::{FormatError, tag, tag_name};

/// A variant read by `deserialize_enum`.
pub(super) struct Variant<'a, 'de> {
    pub(super) de: &'a mut Decoder<'de>,
    pub(super) kind: u8,
    pub(super) name: &'de str,
}

impl<'a, 'de> de::EnumAccess<'de> for Variant<'a, 'de> {
    type Error = FormatError;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self), FormatError> {
        let name = BorrowedStrDeserializer::<FormatError>::new(self.name);
        let value = seed.deserialize(name)?;
        Ok((value, self))
    }
}

impl<'de> Variant<'_, 'de> {
    fn expect(&self, wanted: u8) -> Result<(), FormatError> {
        if self.kind == wanted {
            Ok(())
        } else {
            Err(FormatError::new(format!(
                "variant `{}` is recorded as a {} but the type has a {}",
                self.name,
                tag_name(self.kind),
                tag_name(wanted)
            )))
        }
    }
}

impl<'de> de::VariantAccess<'de> for Variant<'_, 'de> {
    type Error = FormatError;

    fn unit_variant(self) -> Result<(), FormatError> {
        self.expect(tag::UNIT_VARIANT)
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<S::Value, FormatError> {
        self.expect(tag::NEWTYPE_VARIANT)?;
        seed.deserialize(&mut *self.de)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        self.expect(tag::TUPLE_VARIANT)?;
        let len = self.de.reader.count(1)?;
        self.de.seq(len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        self.expect(tag::STRUCT_VARIANT)?;
        let len = self.de.reader.count(2)?;
        self.de.map(len, visitor)
    }
}

/// A newtype, tuple or struct variant read by `deserialize_any`: `{name: content}`.
pub(super) struct VariantAsMap<'a, 'de> {
    pub(super) de: &'a mut Decoder<'de>,
    pub(super) kind: u8,
    pub(super) name: Option<&'de str>,
    pub(super) value_read: bool,
}

impl<'de> de::MapAccess<'de> for VariantAsMap<'_, 'de> {
    type Error = FormatError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, FormatError> {
        match self.name.take() {
            Some(name) => {
                let name = BorrowedStrDeserializer::<FormatError>::new(name);
                seed.deserialize(name).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, FormatError> {
        if self.value_read {
            return Err(FormatError::new("a variant's content was read twice"));
        }
        self.value_read = true;
        match self.kind {
            tag::NEWTYPE_VARIANT => seed.deserialize(&mut *self.de),
            tag::TUPLE_VARIANT => {
                let len = self.de.reader.count(1)?;
                seed.deserialize(Body {
                    de: &mut *self.de,
                    len,
                    map: false,
                })
            }
            _ => {
                let len = self.de.reader.count(2)?;
                seed.deserialize(Body {
                    de: &mut *self.de,
                    len,
                    map: true,
                })
            }
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(usize::from(self.name.is_some()))
    }
}

/// The body of a tuple or struct variant whose count was read already.
struct Body<'a, 'de> {
    de: &'a mut Decoder<'de>,
    len: usize,
    map: bool,
}

impl<'de> de::Deserializer<'de> for Body<'_, 'de> {
    type Error = FormatError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
        if self.map {
            self.de.map(self.len, visitor)
        } else {
            self.de.seq(self.len, visitor)
        }
    }

    fn is_human_readable(&self) -> bool {
        true
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}
