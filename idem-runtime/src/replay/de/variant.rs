//! Enum variants: read as the type's enum asks (`deserialize_enum`), or, without a type's
//! guidance (`deserialize_any`, or a map or struct asked for), as JSON shows them:
//! `{name: content}`.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, Unexpected, Visitor};

use super::Decoder;
use crate::replay::format::{FormatError, tag, tag_name};
use crate::replay::node;

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

/// The content of a newtype, tuple or struct variant (`kind`) read as a map's value.
pub(super) fn content<'de, S: DeserializeSeed<'de>>(
    de: &mut Decoder<'de>,
    kind: u8,
    seed: S,
) -> Result<S::Value, FormatError> {
    match kind {
        tag::NEWTYPE_VARIANT => seed.deserialize(de),
        tag::TUPLE_VARIANT => {
            let len = de.reader.count(1)?;
            seed.deserialize(Body {
                de,
                len,
                map: false,
            })
        }
        _ => {
            let len = de.reader.count(2)?;
            seed.deserialize(Body { de, len, map: true })
        }
    }
}

/// The body of a tuple or struct variant whose count was read already: a sequence or a map,
/// which a type asking for anything else is refused, as the decoder refuses it.
struct Body<'a, 'de> {
    de: &'a mut Decoder<'de>,
    len: usize,
    map: bool,
}

impl Body<'_, '_> {
    fn invalid(&self, expected: &dyn de::Expected) -> FormatError {
        let unexpected = if self.map {
            Unexpected::Map
        } else {
            Unexpected::Seq
        };
        de::Error::invalid_type(unexpected, expected)
    }
}

/// `Deserializer` methods a variant's body refuses.
macro_rules! refused {
    ($($method:ident)+) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
            Err(self.invalid(&visitor))
        }
    )+};
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

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
        if self.map {
            return Err(self.invalid(&visitor));
        }
        self.de.seq(self.len, visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
        if !self.map {
            return Err(self.invalid(&visitor));
        }
        self.de.map(self.len, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        self.deserialize_any(visitor)
    }

    /// The body is there: `Some` of it.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormatError> {
        for _ in 0..self.len.saturating_mul(if self.map { 2 } else { 1 }) {
            node::read(&mut self.de.reader, self.de.depth)?;
        }
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        Err(self.invalid(&visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        Err(self.invalid(&visitor))
    }

    refused! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_identifier
    }

    fn is_human_readable(&self) -> bool {
        true
    }
}
