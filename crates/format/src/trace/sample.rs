//! Random trace elements for property tests and fuzzing corpora: every attribute type and content
//! model gets values that exercise escaping, multi-part counters and optional attributes.

use uuid::Uuid;

use super::attrs::{
    CodeType, FilterMode, GenericPattern, IsArray, MultiPart, ObjRef, Seconds, SigNotation,
    SourceCoordinateType, ValueType,
};
use super::{Exception, NoContent, Parameter, Return, Signature, Text, Value, Values};

/// A small deterministic generator (SplitMix64), seeded by the property test.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

pub trait Sample {
    fn sample(rng: &mut Rng) -> Self;
}

impl<T: Sample> Sample for Option<T> {
    fn sample(rng: &mut Rng) -> Self {
        (rng.below(3) != 0).then(|| T::sample(rng))
    }
}

impl Sample for String {
    fn sample(rng: &mut Rng) -> Self {
        const PIECES: &[&str] = &[
            "main",
            "java.lang.String",
            " ",
            "&",
            "<",
            ">",
            "\"",
            "'",
            "\n",
            "\t",
            "\r",
            "é",
            "日本",
            "$1",
            "-Unavailable-",
            "]]>",
            "&amp;",
        ];
        (0..rng.below(5))
            .map(|_| PIECES[rng.below(PIECES.len() as u64) as usize])
            .collect()
    }
}

impl Sample for u32 {
    fn sample(rng: &mut Rng) -> Self {
        match rng.below(3) {
            0 => rng.below(10) as u32,
            1 => u32::MAX,
            _ => rng.next_u64() as u32,
        }
    }
}

impl Sample for u64 {
    fn sample(rng: &mut Rng) -> Self {
        rng.next_u64() >> rng.below(64)
    }
}

impl Sample for i64 {
    fn sample(rng: &mut Rng) -> Self {
        rng.next_u64() as i64
    }
}

impl Sample for bool {
    fn sample(rng: &mut Rng) -> Self {
        rng.below(2) == 0
    }
}

impl Sample for Uuid {
    fn sample(rng: &mut Rng) -> Self {
        Uuid::from_u64_pair(rng.next_u64(), rng.next_u64())
    }
}

impl Sample for Seconds {
    fn sample(rng: &mut Rng) -> Self {
        Seconds {
            secs: rng.next_u64() >> 20,
            nanos: rng.below(1_000_000_000) as u32,
        }
    }
}

impl Sample for MultiPart {
    fn sample(rng: &mut Rng) -> Self {
        let value = (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
        MultiPart(value >> rng.below(128))
    }
}

impl Sample for ObjRef {
    fn sample(rng: &mut Rng) -> Self {
        if rng.below(4) == 0 {
            ObjRef::Unavailable
        } else {
            ObjRef::Id(u32::sample(rng))
        }
    }
}

macro_rules! sample_enum {
    ($($ty:ty),*) => {$(
        impl Sample for $ty {
            fn sample(rng: &mut Rng) -> Self {
                <$ty>::ALL[rng.below(<$ty>::ALL.len() as u64) as usize]
            }
        }
    )*};
}
sample_enum!(
    IsArray,
    GenericPattern,
    FilterMode,
    ValueType,
    SigNotation,
    SourceCoordinateType,
    CodeType
);

impl Sample for NoContent {
    fn sample(_rng: &mut Rng) -> Self {
        NoContent
    }
}

impl Sample for Text {
    fn sample(rng: &mut Rng) -> Self {
        Text(String::sample(rng))
    }
}

impl Sample for Values {
    fn sample(rng: &mut Rng) -> Self {
        Values((0..rng.below(3)).map(|_| Value::sample(rng)).collect())
    }
}

impl Sample for Signature {
    fn sample(rng: &mut Rng) -> Self {
        Signature {
            returns: Option::<Return>::sample(rng),
            parameters: (0..rng.below(3)).map(|_| Parameter::sample(rng)).collect(),
            exceptions: (0..rng.below(2)).map(|_| Exception::sample(rng)).collect(),
        }
    }
}

/// A gcStart with `count` attributes in all: unknown ones, then its time. Readers must refuse
/// it past their attribute limit, quickly.
pub fn with_attributes(count: usize) -> String {
    let mut out = String::from("<gcStart");
    for number in 1..count {
        out.push_str(&format!(" a{number}=\"{number}\""));
    }
    out.push_str(" time=\"1.5\"/>");
    out
}
