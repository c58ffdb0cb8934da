//! The check of our own stack walker against AsyncGetCallTrace (`walker=check`): both walk
//! every sample, and how their walks compare is counted by kind, with a few examples of each
//! kind that is not agreement kept for the dump, so that a reader can see what a kind is.

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use openprof_format::hprof_text::WalkerExample;

use crate::jvmti::{jmethodID, Jvmti};
use crate::methods::Methods;
use crate::ring::{CallFrame, NATIVE_PC_LINENO};
use crate::vm_walker::WalkFailure;

/// What the check found, by kind: how AsyncGetCallTrace's walk and ours compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Comparison {
    /// The same frames: methods and bytecode indices.
    Same = 0,
    /// The same methods; the top frame's bytecode index differs, the top frame compiled.
    OtherTopLine,
    /// The same, the top frame interpreted.
    OtherTopLineInterpreted,
    /// The same methods; a bytecode index below the top frame differs.
    OtherLines,
    /// The leaf frames differ within the top compiled frame's inlined methods, the rest agree.
    OtherInlinedLeaf,
    /// One walk is the other with frames missing at the bottom.
    Shorter,
    /// Ours has one more frame on top, the rest the same: a method at its entry (its frame
    /// not built yet), which AsyncGetCallTrace credits to its caller.
    OursEntryOnTop,
    /// AsyncGetCallTrace's has one more frame on top, the rest the same.
    AsgctExtraOnTop,
    /// Ours ended at a virtual thread's continuation, AsyncGetCallTrace went on into its
    /// carrier's frames.
    VirtualThreadEnd,
    /// Frames differ where ours walked compiled code JVMTI had not reported yet (whose
    /// inlined methods ours does not know).
    Unreported,
    /// Frames differ elsewhere.
    OtherFrames,
    /// AsyncGetCallTrace failed; ours walked.
    OnlyOursWalked,
    /// Ours failed; AsyncGetCallTrace walked.
    OnlyAsgctWalked,
    /// Both failed.
    BothFailed,
}

impl Comparison {
    const ALL: [Comparison; 14] = [
        Comparison::Same,
        Comparison::OtherTopLine,
        Comparison::OtherTopLineInterpreted,
        Comparison::OtherLines,
        Comparison::OtherInlinedLeaf,
        Comparison::Shorter,
        Comparison::OursEntryOnTop,
        Comparison::AsgctExtraOnTop,
        Comparison::VirtualThreadEnd,
        Comparison::Unreported,
        Comparison::OtherFrames,
        Comparison::OnlyOursWalked,
        Comparison::OnlyAsgctWalked,
        Comparison::BothFailed,
    ];

    fn name(self) -> &'static str {
        match self {
            Comparison::Same => "same",
            Comparison::OtherTopLine => "other_top_line",
            Comparison::OtherTopLineInterpreted => "other_top_line_interpreted",
            Comparison::OtherLines => "other_lines",
            Comparison::OtherInlinedLeaf => "other_inlined_leaf",
            Comparison::Shorter => "shorter",
            Comparison::OursEntryOnTop => "vm_entry_on_top",
            Comparison::AsgctExtraOnTop => "asgct_extra_on_top",
            Comparison::VirtualThreadEnd => "vm_virtual_thread_end",
            Comparison::Unreported => "vm_unreported_code",
            Comparison::OtherFrames => "other_frames",
            Comparison::OnlyOursWalked => "only_vm_walked",
            Comparison::OnlyAsgctWalked => "only_asgct_walked",
            Comparison::BothFailed => "both_failed",
        }
    }
}

/// By whether AsyncGetCallTrace's walk was a recovered one, then by kind.
static COMPARISONS: [[AtomicU64; 14]; 2] = [const { [const { AtomicU64::new(0) }; 14] }; 2];
/// Compares AsyncGetCallTrace's walk (`asgct`, or its failure; `recovered` when one of the
/// second walks of `signals.rs` made it) with ours (whose stub frames are left out, as
/// AsyncGetCallTrace has none) and counts the kind. `leaf_frames` is how many leaf frames
/// of ours came from the top Java frame.
pub fn compare(
    asgct: Result<&[CallFrame], i32>,
    recovered: bool,
    ours: Result<&[CallFrame], WalkFailure>,
    leaf_frames: usize,
    top_interpreted: bool,
    unreported: bool,
    virtual_thread: bool,
) {
    let mut java = [CallFrame::failed_walk(0); COMPARED_FRAMES];
    let mut count = 0;
    if let Ok(ours) = ours {
        for frame in ours.iter().filter(|frame| frame.lineno != NATIVE_PC_LINENO) {
            if count == COMPARED_FRAMES {
                break;
            }
            java[count] = *frame;
            count += 1;
        }
    }
    let ours_java = &java[..count];
    let theirs = asgct.map(|theirs| &theirs[..theirs.len().min(count.max(COMPARED_FRAMES))]);
    let kind = match (theirs, ours) {
        (Err(_), Err(_)) => Comparison::BothFailed,
        (Err(_), Ok(_)) => Comparison::OnlyOursWalked,
        (Ok(_), Err(_)) => Comparison::OnlyAsgctWalked,
        (Ok(theirs), Ok(_)) => match compare_frames(theirs, ours_java, leaf_frames) {
            Comparison::OtherTopLine if top_interpreted => Comparison::OtherTopLineInterpreted,
            kind @ (Comparison::Same | Comparison::OtherTopLine) => kind,
            Comparison::Shorter if virtual_thread && count < theirs.len() => {
                Comparison::VirtualThreadEnd
            }
            _ if unreported => Comparison::Unreported,
            kind => kind,
        },
    };
    COMPARISONS[usize::from(recovered)][kind as usize].fetch_add(1, Ordering::Relaxed);
    if kind != Comparison::Same {
        keep_example(kind, ours_java, theirs.unwrap_or(&[]));
    }
}

/// How many examples of each kind a dump keeps, and how many leaf frames of each walk.
const EXAMPLES_PER_KIND: usize = 2;
pub const EXAMPLE_FRAMES: usize = 16;

/// One example's place: free, being written by a signal handler, or ready for the dump. Only
/// atomics, so that a handler can fill it without a lock and the dump read it beside handlers.
struct ExampleSlot {
    state: AtomicU8,
    kind: AtomicUsize,
    /// Ours, then AsyncGetCallTrace's: how many frames, and each frame's method and bci.
    lengths: [AtomicUsize; 2],
    methods: [[AtomicUsize; EXAMPLE_FRAMES]; 2],
    bcis: [[AtomicI32; EXAMPLE_FRAMES]; 2],
}

const FREE: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

impl ExampleSlot {
    const fn new() -> ExampleSlot {
        ExampleSlot {
            state: AtomicU8::new(FREE),
            kind: AtomicUsize::new(0),
            lengths: [const { AtomicUsize::new(0) }; 2],
            methods: [const { [const { AtomicUsize::new(0) }; EXAMPLE_FRAMES] }; 2],
            bcis: [const { [const { AtomicI32::new(0) }; EXAMPLE_FRAMES] }; 2],
        }
    }
}

static EXAMPLES: [[ExampleSlot; EXAMPLES_PER_KIND]; 14] =
    [const { [const { ExampleSlot::new() }; EXAMPLES_PER_KIND] }; 14];

/// Keeps a sample's two walks as an example of `kind` if the kind has a free place.
fn keep_example(kind: Comparison, ours: &[CallFrame], theirs: &[CallFrame]) {
    let Some(slot) = EXAMPLES[kind as usize].iter().find(|slot| {
        slot.state
            .compare_exchange(FREE, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }) else {
        return;
    };
    slot.kind.store(kind as usize, Ordering::Relaxed);
    for (walk, frames) in [ours, theirs].into_iter().enumerate() {
        let kept = frames.len().min(EXAMPLE_FRAMES);
        slot.lengths[walk].store(kept, Ordering::Relaxed);
        for (index, frame) in frames[..kept].iter().enumerate() {
            slot.methods[walk][index].store(frame.method_id as usize, Ordering::Relaxed);
            slot.bcis[walk][index].store(frame.lineno, Ordering::Relaxed);
        }
    }
    slot.state.store(READY, Ordering::Release);
}

/// The examples kept since the last call, their frames named (`package.Class.method@bci`);
/// their places are freed for the next ones.
pub fn take_named_examples(jvmti: Jvmti) -> Vec<WalkerExample> {
    let mut methods = Methods::default();
    let mut name = |(method, bci): (jmethodID, i32)| {
        let info = methods.get(jvmti, method);
        let named = format!("{}.{}@{bci}", info.class_name, info.method_name);
        // A method JVMTI cannot name (its class gone) is named with spaces: `?` in the line.
        if named.contains(char::is_whitespace) {
            "?".to_string()
        } else {
            named
        }
    };
    take_examples()
        .into_iter()
        .map(|example| WalkerExample {
            kind: example.kind.to_string(),
            vm: example.ours.into_iter().map(&mut name).collect(),
            asgct: example.theirs.into_iter().map(&mut name).collect(),
        })
        .collect()
}

/// A disagreement kept by the check: its kind's name, and the leaf frames (method, bci) of
/// our walk and of AsyncGetCallTrace's, leaf first; a failed walk has none.
struct Example {
    kind: &'static str,
    ours: Vec<(jmethodID, i32)>,
    theirs: Vec<(jmethodID, i32)>,
}

/// The examples kept since the last call; their places are freed for the next ones.
fn take_examples() -> Vec<Example> {
    let mut examples = Vec::new();
    for slot in EXAMPLES.iter().flatten() {
        if slot.state.load(Ordering::Acquire) != READY {
            continue;
        }
        let frames = |walk: usize| -> Vec<(jmethodID, i32)> {
            (0..slot.lengths[walk].load(Ordering::Relaxed))
                .map(|index| {
                    (
                        slot.methods[walk][index].load(Ordering::Relaxed) as jmethodID,
                        slot.bcis[walk][index].load(Ordering::Relaxed),
                    )
                })
                .collect()
        };
        let kind = Comparison::ALL[slot.kind.load(Ordering::Relaxed) % Comparison::ALL.len()];
        examples.push(Example {
            kind: kind.name(),
            ours: frames(0),
            theirs: frames(1),
        });
        slot.state.store(FREE, Ordering::Release);
    }
    examples
}

/// How many frames of each walk the check compares: the leaf ones, where walks differ.
pub const COMPARED_FRAMES: usize = 128;

fn compare_frames(theirs: &[CallFrame], ours: &[CallFrame], leaf_scopes: usize) -> Comparison {
    let same_method = |a: &CallFrame, b: &CallFrame| a.method_id == b.method_id;
    let common = theirs.len().min(ours.len());
    let methods_agree = theirs[..common]
        .iter()
        .zip(&ours[..common])
        .all(|(a, b)| same_method(a, b));
    if methods_agree && theirs.len() == ours.len() {
        let lines_agree = theirs.iter().zip(ours).all(|(a, b)| a.lineno == b.lineno);
        let below_top_agree = theirs
            .iter()
            .zip(ours)
            .skip(1)
            .all(|(a, b)| a.lineno == b.lineno);
        return match (lines_agree, below_top_agree) {
            (true, _) => Comparison::Same,
            (false, true) => Comparison::OtherTopLine,
            (false, false) => Comparison::OtherLines,
        };
    }
    if methods_agree {
        return Comparison::Shorter;
    }
    // One more frame on top of one walk, the rest the same (up to the shorter's end).
    let one_more_on_top = |longer: &[CallFrame], shorter: &[CallFrame]| {
        longer.len() > 1
            && longer[1..]
                .iter()
                .zip(shorter)
                .all(|(a, b)| same_method(a, b))
    };
    if one_more_on_top(ours, theirs) {
        return Comparison::OursEntryOnTop;
    }
    if one_more_on_top(theirs, ours) {
        return Comparison::AsgctExtraOnTop;
    }
    // Below the leaf compiled frame's inlined methods, do the two agree from the bottom up?
    let below = |frames: &[CallFrame]| frames.len().saturating_sub(leaf_scopes.max(1));
    let (theirs_rest, ours_rest) = (below(theirs), below(ours));
    let bottoms_agree = theirs_rest > 0
        && ours_rest > 0
        && theirs[theirs.len() - theirs_rest.min(ours_rest)..]
            .iter()
            .zip(&ours[ours.len() - theirs_rest.min(ours_rest)..])
            .all(|(a, b)| same_method(a, b));
    if bottoms_agree && leaf_scopes > 1 {
        Comparison::OtherInlinedLeaf
    } else {
        Comparison::OtherFrames
    }
}

/// The counts since the last call, by name: `check.<kind>`, and `check.recovered.<kind>`
/// for samples AsyncGetCallTrace walked by a second walk.
pub fn take_counts() -> Vec<(String, u64)> {
    let mut counts = Vec::new();
    for (recovered, prefix) in [(0, "check"), (1, "check.recovered")] {
        for kind in Comparison::ALL {
            let count = COMPARISONS[recovered][kind as usize].swap(0, Ordering::Relaxed);
            if count > 0 {
                counts.push((format!("{prefix}.{}", kind.name()), count));
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(methods: &[usize]) -> Vec<CallFrame> {
        methods
            .iter()
            .map(|&method| CallFrame {
                lineno: 1,
                method_id: method as jmethodID,
            })
            .collect()
    }

    #[test]
    fn walks_compare_by_kind() {
        let a = frames(&[1, 2, 3, 4]);
        assert_eq!(compare_frames(&a, &a, 1), Comparison::Same);
        let mut lines = a.clone();
        lines[2].lineno = 7;
        assert_eq!(compare_frames(&a, &lines, 1), Comparison::OtherLines);
        let mut top_line = a.clone();
        top_line[0].lineno = 7;
        assert_eq!(compare_frames(&a, &top_line, 1), Comparison::OtherTopLine);
        assert_eq!(compare_frames(&a, &a[..3], 1), Comparison::Shorter);
        // The two leaf frames come from one compiled frame; AsyncGetCallTrace chose another
        // inlined scope there.
        let other_leaf = frames(&[9, 3, 4]);
        assert_eq!(
            compare_frames(&other_leaf, &a, 2),
            Comparison::OtherInlinedLeaf
        );
        assert_eq!(
            compare_frames(&a, &frames(&[7, 1, 2, 3, 4]), 1),
            Comparison::OursEntryOnTop
        );
        assert_eq!(
            compare_frames(&a, &frames(&[2, 3, 4]), 1),
            Comparison::AsgctExtraOnTop
        );
        let other = frames(&[1, 2, 8, 4]);
        assert_eq!(compare_frames(&a, &other, 1), Comparison::OtherFrames);
    }
}
