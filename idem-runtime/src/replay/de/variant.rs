//! Enum variants: read as the type's enum asks (`deserialize_enum`), or, without a type's
//! guidance (`deserialize_any`, or a map or struct asked for), as JSON shows them:
//! `{name: content}`.

use serde::de::{self, DeserializeSeed, Visitor};

use super::Decoder;
use crate::replay::format::{FormatError, tag, tag_name, tri};

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
        // Its name, read as a string, as the decoder's next value.
        self.de.name = Some(self.name);
        let value = tri!(seed.deserialize(&mut *self.de));
        Ok((value, self))
    }
}

impl<'de> Variant<'_, 'de> {
    /// Checks that the variant is of the kind the type reads (`wanted`), its name read (or
    /// left unread by the type, then not offered as its content).
    fn expect(&mut self, wanted: u8) -> Result<(), FormatError> {
        self.de.name = None;
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

    fn unit_variant(mut self) -> Result<(), FormatError> {
        self.expect(tag::UNIT_VARIANT)
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(
        mut self,
        seed: S,
    ) -> Result<S::Value, FormatError> {
        tri!(self.expect(tag::NEWTYPE_VARIANT));
        seed.deserialize(&mut *self.de)
    }

    fn tuple_variant<V: Visitor<'de>>(
        mut self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        tri!(self.expect(tag::TUPLE_VARIANT));
        let len = tri!(self.de.reader.count(1));
        self.de.seq(len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        mut self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FormatError> {
        tri!(self.expect(tag::STRUCT_VARIANT));
        let len = tri!(self.de.reader.count(2));
        self.de.entries(len, None, visitor)
    }
}

/// The tag that stands for the content of a newtype, tuple or struct variant (`kind`) read as
/// a map's value: none for a newtype variant (its value is a value, with its tag), else that
/// of the sequence or map its body is.
pub(super) fn content_tag(kind: u8) -> Option<u8> {
    match kind {
        tag::NEWTYPE_VARIANT => None,
        tag::TUPLE_VARIANT => Some(tag::SEQ),
        _ => Some(tag::MAP),
    }
}
