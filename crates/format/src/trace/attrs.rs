//! The attribute value formats of the trace elements (docs/trace-format.md), each with its exact
//! text form: times as seconds.fraction, multi-part counters low-order first, UUIDs, isArray
//! codes, "-Unavailable-" object references, and the enumerated values.

use std::fmt::Write;

/// An attribute's value: how it is written and read back.
pub trait AttrValue: Sized {
    /// Whether the text may hold characters XML must escape (only free text does).
    const NEEDS_ESCAPING: bool = false;
    /// Appends the value's text (unescaped; the writer escapes it).
    fn write_value(&self, out: &mut String);
    /// Reads the value's text, or says what is wrong with it.
    fn parse_value(text: &str) -> Result<Self, String>;
    /// Reads the value from the bytes of its text, which the reader has checked to be UTF-8;
    /// the same values as [`AttrValue::parse_value`], the same errors. The reader's path:
    /// numbers are read straight from their digits.
    fn parse_bytes(bytes: &[u8]) -> Result<Self, String> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::parse_value(text),
            Err(_) => Err(format!("'{}' is not UTF-8", String::from_utf8_lossy(bytes))),
        }
    }
    /// Appends the value as an attribute's value: escaped where it may need it.
    fn write_attribute_value(&self, out: &mut String) {
        self.write_value(out);
    }
}

impl AttrValue for String {
    const NEEDS_ESCAPING: bool = true;
    fn write_value(&self, out: &mut String) {
        out.push_str(self);
    }
    fn parse_value(text: &str) -> Result<Self, String> {
        Ok(text.to_string())
    }
    fn write_attribute_value(&self, out: &mut String) {
        super::escape_attribute(self, out);
    }
}

/// The digits of an unsigned decimal as `str::parse` reads them (an optional `+`, then at least
/// one ASCII digit), if their value is at most `max`.
fn unsigned_from_bytes(bytes: &[u8], max: u64) -> Option<u64> {
    let digits = bytes.strip_prefix(b"+").unwrap_or(bytes);
    if digits.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    // Nineteen digits can't overflow a u64: only longer numbers need checked arithmetic.
    if digits.len() <= 19 {
        for &byte in digits {
            let digit = byte.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            value = value * 10 + u64::from(digit);
        }
    } else {
        for &byte in digits {
            let digit = byte.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
        }
    }
    (value <= max).then_some(value)
}

/// A signed decimal as `str::parse` reads it (an optional sign, then at least one digit), if it
/// lies within `min..=max`.
fn signed_from_bytes(bytes: &[u8], min: i64, max: i64) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, bytes),
    };
    if digits.first() == Some(&b'+') {
        return None;
    }
    let magnitude = unsigned_from_bytes(digits, u64::MAX)?;
    let value = if negative {
        0i64.checked_sub_unsigned(magnitude)?
    } else {
        i64::try_from(magnitude).ok()?
    };
    (min..=max).contains(&value).then_some(value)
}

macro_rules! numeric_attr {
    ($($ty:ty => $from_bytes:expr),* $(,)?) => {$(
        impl AttrValue for $ty {
            fn write_value(&self, out: &mut String) {
                out.push_str(itoa::Buffer::new().format(*self));
            }
            fn parse_value(text: &str) -> Result<Self, String> {
                text.parse().map_err(|_| format!("'{text}' is not a {}", stringify!($ty)))
            }
            fn parse_bytes(bytes: &[u8]) -> Result<Self, String> {
                let from_bytes: fn(&[u8]) -> Option<$ty> = $from_bytes;
                from_bytes(bytes).ok_or_else(|| {
                    format!("'{}' is not a {}", String::from_utf8_lossy(bytes), stringify!($ty))
                })
            }
        }
    )*};
}
numeric_attr!(
    u32 => |bytes| unsigned_from_bytes(bytes, u32::MAX.into()).map(|value| value as u32),
    u64 => |bytes| unsigned_from_bytes(bytes, u64::MAX),
    i32 => |bytes| signed_from_bytes(bytes, i32::MIN.into(), i32::MAX.into()).map(|value| value as i32),
    i64 => |bytes| signed_from_bytes(bytes, i64::MIN, i64::MAX),
);

impl AttrValue for uuid::Uuid {
    fn write_value(&self, out: &mut String) {
        out.push_str(
            self.hyphenated()
                .encode_lower(&mut uuid::Uuid::encode_buffer()),
        );
    }
    fn parse_value(text: &str) -> Result<Self, String> {
        uuid::Uuid::parse_str(text).map_err(|_| format!("'{text}' is not a UUID"))
    }
    fn parse_bytes(bytes: &[u8]) -> Result<Self, String> {
        uuid::Uuid::try_parse_ascii(bytes)
            .map_err(|_| format!("'{}' is not a UUID", String::from_utf8_lossy(bytes)))
    }
}

/// A point or span of time as seconds and a fraction: `time` (seconds since the epoch, UTC) and
/// `threadCpuTime` (CPU seconds of the thread). Written with nanosecond precision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seconds {
    pub secs: u64,
    pub nanos: u32,
}

impl Seconds {
    pub fn from_nanos(nanos: u128) -> Seconds {
        Seconds {
            secs: (nanos / 1_000_000_000) as u64,
            nanos: (nanos % 1_000_000_000) as u32,
        }
    }

    pub fn as_nanos(self) -> u128 {
        u128::from(self.secs) * 1_000_000_000 + u128::from(self.nanos)
    }

    /// Now, as seconds since the epoch.
    pub fn now() -> Seconds {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Seconds {
            secs: since.as_secs(),
            nanos: since.subsec_nanos(),
        }
    }
}

impl AttrValue for Seconds {
    fn write_value(&self, out: &mut String) {
        let mut digits = itoa::Buffer::new();
        out.push_str(digits.format(self.secs));
        out.push('.');
        if self.nanos < 1_000_000_000 {
            // Nine digits, leading zeros kept: those of 1_000_000_000 + nanos after its '1'.
            out.push_str(&digits.format(self.nanos + 1_000_000_000)[1..]);
        } else {
            let _ = write!(out, "{:09}", self.nanos);
        }
    }
    fn parse_value(text: &str) -> Result<Self, String> {
        Self::parse_bytes(text.as_bytes())
    }
    fn parse_bytes(bytes: &[u8]) -> Result<Self, String> {
        let bad = || {
            format!(
                "'{}' is not seconds.fraction",
                String::from_utf8_lossy(bytes)
            )
        };
        let (secs, fraction) = match bytes.iter().position(|&b| b == b'.') {
            Some(dot) => (&bytes[..dot], &bytes[dot + 1..]),
            None => (bytes, &[][..]),
        };
        if secs.is_empty() || fraction.len() > 9 {
            return Err(bad());
        }
        let mut nanos = 0u32;
        for &byte in fraction {
            let digit = byte.wrapping_sub(b'0');
            if digit > 9 {
                return Err(bad());
            }
            nanos = nanos * 10 + u32::from(digit);
        }
        const SCALE: [u32; 10] = [
            1_000_000_000,
            100_000_000,
            10_000_000,
            1_000_000,
            100_000,
            10_000,
            1_000,
            100,
            10,
            1,
        ];
        Ok(Seconds {
            secs: unsigned_from_bytes(secs, u64::MAX).ok_or_else(bad)?,
            nanos: nanos * SCALE[fraction.len()],
        })
    }
}

/// A counter that may exceed 32 bits, written as 32-bit parts `n[,n]*`, low-order first:
/// `ticket` and `collationValue`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MultiPart(pub u128);

impl AttrValue for MultiPart {
    fn write_value(&self, out: &mut String) {
        let mut digits = itoa::Buffer::new();
        let mut rest = self.0;
        loop {
            out.push_str(digits.format(rest as u32));
            rest >>= 32;
            if rest == 0 {
                break;
            }
            out.push(',');
        }
    }
    fn parse_value(text: &str) -> Result<Self, String> {
        Self::parse_bytes(text.as_bytes())
    }
    fn parse_bytes(bytes: &[u8]) -> Result<Self, String> {
        // Most counters have one part.
        if !bytes.contains(&b',') {
            if let Some(value) = unsigned_from_bytes(bytes, u32::MAX.into()) {
                return Ok(MultiPart(value.into()));
            }
        }
        let mut value: u128 = 0;
        for (index, part) in bytes.split(|&b| b == b',').enumerate() {
            if index >= 4 {
                return Err(format!(
                    "'{}' has more than four 32-bit parts",
                    String::from_utf8_lossy(bytes)
                ));
            }
            let part = unsigned_from_bytes(part, u32::MAX.into()).ok_or_else(|| {
                format!(
                    "'{}' is not n[,n]* of 32-bit numbers",
                    String::from_utf8_lossy(bytes)
                )
            })?;
            value |= u128::from(part) << (32 * index);
        }
        Ok(MultiPart(value))
    }
}

/// A reference to an object that may be unavailable (`throw`, `catch`: "-Unavailable-" when the
/// exception's class is filtered out or the VM cannot say).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjRef {
    Id(u32),
    Unavailable,
}

impl AttrValue for ObjRef {
    fn write_value(&self, out: &mut String) {
        match self {
            ObjRef::Id(id) => id.write_value(out),
            ObjRef::Unavailable => out.push_str("-Unavailable-"),
        }
    }
    fn parse_value(text: &str) -> Result<Self, String> {
        if text == "-Unavailable-" {
            Ok(ObjRef::Unavailable)
        } else {
            u32::parse_value(text)
                .map(ObjRef::Id)
                .map_err(|_| format!("'{text}' is neither an object id nor -Unavailable-"))
        }
    }
}

/// Declares an attribute enumeration with its exact spellings.
macro_rules! enum_attr {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
        }

        impl AttrValue for $name {
            fn write_value(&self, out: &mut String) {
                out.push_str(self.as_str());
            }
            fn parse_value(text: &str) -> Result<Self, String> {
                match text {
                    $($text => Ok($name::$variant),)*
                    _ => Err(format!(
                        "'{text}' is not one of {}",
                        [$($text),*].join(", ")
                    )),
                }
            }
        }
    };
}

enum_attr!(
    /// The `isArray` codes: 0 for no array, else the array's element type.
    IsArray {
        NotArray = "0",
        Objects = "2",
        Booleans = "4",
        Chars = "5",
        Floats = "6",
        Doubles = "7",
        Bytes = "8",
        Shorts = "9",
        Ints = "10",
        Longs = "11",
    }
);

enum_attr!(
    /// A filter pattern's wildcard: `none` (exact), `prefix` ("*print": ends with), `suffix`
    /// ("java*": starts with).
    GenericPattern {
        None = "none",
        Prefix = "prefix",
        Suffix = "suffix",
    }
);

enum_attr!(
    /// A filter's mode.
    FilterMode {
        Include = "include",
        Exclude = "exclude",
    }
);

enum_attr!(
    /// The `type` of a `value` element: TPTP's types, plus those method parameter tracing
    /// needs: `byte`, `short` for the remaining primitives, `class` for a Class
    /// (its name), `objectId` for an object's identity, and `error` for a value that could not be
    /// had (its text is the error value, e.g. `NullValue`).
    ValueType {
        SerializedObjValueRef = "serializedObjValueRef",
        SerializedObjValue = "serializedObjValue",
        SerializedObjValueInline = "serializedObjValueInline",
        Boolean = "boolean",
        Char = "char",
        Int = "int",
        Long = "long",
        Float = "float",
        Double = "double",
        String = "string",
        Opaque = "opaque",
        Byte = "byte",
        Short = "short",
        Class = "class",
        ObjectId = "objectId",
        Error = "error",
    }
);

enum_attr!(
    /// methodDef's `sigNotation`: how its `signature` is spelled.
    SigNotation {
        Jni = "JNI",
        Xml = "XML",
    }
);

enum_attr!(
    /// lineTable's `sourceCoordinateType`.
    SourceCoordinateType {
        LineNumber = "lineNumber",
        ByteOffset = "byteOffset",
    }
);

enum_attr!(
    /// The `type` of a `code` element.
    CodeType {
        Reference = "Reference",
        Java = "Java",
        CPlusPlus = "C++",
        C = "C",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(value: &impl AttrValue) -> String {
        let mut out = String::new();
        value.write_value(&mut out);
        out
    }

    #[test]
    fn multi_part_counters_are_low_order_first() {
        assert_eq!(text_of(&MultiPart(1)), "1");
        assert_eq!(text_of(&MultiPart(1 << 32)), "0,1");
        assert_eq!(text_of(&MultiPart((7u128 << 32) | 5)), "5,7");
        assert_eq!(MultiPart::parse_value("5,7"), Ok(MultiPart((7 << 32) | 5)));
        assert!(MultiPart::parse_value("5,").is_err());
        assert!(MultiPart::parse_value("4294967296").is_err());
    }

    #[test]
    fn times_are_seconds_dot_fraction() {
        let time = Seconds::parse_value("987446612.236409").unwrap();
        assert_eq!(
            time,
            Seconds {
                secs: 987446612,
                nanos: 236_409_000
            }
        );
        assert_eq!(text_of(&time), "987446612.236409000");
        assert_eq!(
            Seconds::parse_value("0.2303312").unwrap().nanos,
            230_331_200
        );
        assert!(Seconds::parse_value("1.2.3").is_err());
        assert!(Seconds::parse_value(".5").is_err());
        assert!(Seconds::parse_value("1.1234567890").is_err());
    }

    #[test]
    fn enumerations_keep_their_spellings() {
        assert_eq!(IsArray::parse_value("10"), Ok(IsArray::Ints));
        assert_eq!(text_of(&IsArray::Longs), "11");
        assert!(IsArray::parse_value("3")
            .unwrap_err()
            .contains("not one of 0, 2, 4"));
        assert_eq!(
            ObjRef::parse_value("-Unavailable-"),
            Ok(ObjRef::Unavailable)
        );
        assert_eq!(text_of(&CodeType::CPlusPlus), "C++");
    }
}
