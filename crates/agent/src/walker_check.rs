//! The check of our own stack walker against AsyncGetCallTrace (`walker=check`): both walk
//! every sample, and how their walks compare is counted by kind, with a few examples of each
//! kind that is not agreement kept for the dump, so that a reader can see what a kind is.

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use openprof_format::hprof_text::WalkerExample;

use crate::jvmti::{jmethodID, Jvmti};
use crate::methods::Methods;
use crate::ring::{CallFrame, NATIVE_PC_LINENO};
use crate::vm_walker::{Start, TopFrame, Walk, WalkFailure};

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
    /// The leaf frames differ within the top compiled frame's inlined methods (either walk
    /// having more of them), the rest agree.
    OtherInlinedLeaf,
    /// Ours is AsyncGetCallTrace's with frames missing at the bottom.
    OursShorter,
    /// AsyncGetCallTrace's is ours with frames missing at the bottom.
    AsgctShorter,
    /// AsyncGetCallTrace's top frame is at no debug point (bytecode index -1), in a method of
    /// ours' top compiled frame, and its frames below are not ours.
    AsgctNoDebugPoint,
    /// Ours found the top compiled method in its return, its frame taken down, and went on from
    /// the return address; AsyncGetCallTrace's frames below the same method are not ours.
    AsgctLostAtExit,
    /// Ours stepped over a stub on top of the stack, and the walks differ below it.
    OursOverStub,
    /// AsyncGetCallTrace's walk is ours without its top frames: it began at an older frame.
    AsgctMissingTop,
    /// Ours is AsyncGetCallTrace's without its top frames.
    OursMissingTop,
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

/// How many kinds there are.
const KINDS: usize = 20;

impl Comparison {
    const ALL: [Comparison; KINDS] = [
        Comparison::Same,
        Comparison::OtherTopLine,
        Comparison::OtherTopLineInterpreted,
        Comparison::OtherLines,
        Comparison::OtherInlinedLeaf,
        Comparison::OursShorter,
        Comparison::AsgctShorter,
        Comparison::AsgctNoDebugPoint,
        Comparison::AsgctLostAtExit,
        Comparison::OursOverStub,
        Comparison::AsgctMissingTop,
        Comparison::OursMissingTop,
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
            Comparison::OursShorter => "vm_shorter",
            Comparison::AsgctShorter => "asgct_shorter",
            Comparison::AsgctNoDebugPoint => "asgct_no_debug_point",
            Comparison::AsgctLostAtExit => "asgct_lost_at_exit",
            Comparison::OursOverStub => "vm_over_stub",
            Comparison::AsgctMissingTop => "asgct_missing_top",
            Comparison::OursMissingTop => "vm_missing_top",
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

/// Comparisons by kind.
static COMPARISONS: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];
/// Compares AsyncGetCallTrace's walk (`asgct`, or its failure) with ours (`ours`: the walk and
/// its frames, whose stub frames are left out, as AsyncGetCallTrace has none) and counts the
/// kind.
pub fn compare(asgct: Result<&[CallFrame], i32>, ours: Result<(Walk, &[CallFrame]), WalkFailure>) {
    let mut java = [CallFrame::failed_walk(0); COMPARED_FRAMES];
    let mut count = 0;
    // How many of ours' Java frames came from the top Java frame.
    let mut leaf_frames = 0;
    if let Ok((walk, ours)) = ours {
        for (index, frame) in ours.iter().enumerate() {
            if count == COMPARED_FRAMES {
                break;
            }
            if frame.lineno != NATIVE_PC_LINENO {
                java[count] = *frame;
                count += 1;
                leaf_frames += usize::from(index < walk.leaf_frames);
            }
        }
    }
    let ours_java = &java[..count];
    let theirs = asgct.map(|theirs| &theirs[..theirs.len().min(count.max(COMPARED_FRAMES))]);
    let walk = ours.map(|(walk, _)| walk);
    let kind = match (theirs, walk) {
        (Err(_), Err(_)) => Comparison::BothFailed,
        (Err(_), Ok(_)) => Comparison::OnlyOursWalked,
        (Ok(_), Err(_)) => Comparison::OnlyAsgctWalked,
        (Ok(theirs), Ok(walk)) => match compare_frames(theirs, ours_java, leaf_frames) {
            Comparison::OtherTopLine if walk.top_interpreted => Comparison::OtherTopLineInterpreted,
            kind @ (Comparison::Same | Comparison::OtherTopLine) => kind,
            Comparison::OursShorter if walk.virtual_thread => Comparison::VirtualThreadEnd,
            _ if walk.unreported => Comparison::Unreported,
            kind @ Comparison::AsgctNoDebugPoint => kind,
            _ if walk.started == Start::Stub => Comparison::OursOverStub,
            _ if walk.top == TopFrame::CompiledExit
                && theirs.first().map(|frame| frame.method_id)
                    == ours_java.first().map(|frame| frame.method_id) =>
            {
                Comparison::AsgctLostAtExit
            }
            kind => kind,
        },
    };
    COMPARISONS[kind as usize].fetch_add(1, Ordering::Relaxed);
    if kind != Comparison::Same {
        let how = match walk {
            Ok(walk) => How::Walked {
                top: walk.top,
                started: walk.started,
                leaf_frames,
            },
            Err(failure) => How::Failed(failure),
        };
        keep_example(kind, how, ours_java, theirs.unwrap_or(&[]));
    }
}

/// How our walk of an example went: where it found the top Java frame and how, and how many
/// of its Java frames that frame gave; or why it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    Walked {
        top: TopFrame,
        started: Start,
        leaf_frames: usize,
    },
    Failed(WalkFailure),
}

impl How {
    /// The example's `vm_walk=`: `TOP/START/LEAF_FRAMES`, or `failed/WHY`.
    fn text(self) -> String {
        match self {
            How::Walked {
                top,
                started,
                leaf_frames,
            } => format!("{}/{}/{leaf_frames}", top.name(), started.name()),
            How::Failed(failure) => format!("failed/{}", failure.name()),
        }
    }

    /// As one number, for an atomic: a failure's index + 1 at the bottom byte (0: walked),
    /// then the top frame's and the start's indexes, then the leaf frames.
    fn number(self) -> usize {
        match self {
            How::Walked {
                top,
                started,
                leaf_frames,
            } => {
                let top = TopFrame::ALL
                    .iter()
                    .position(|kind| *kind == top)
                    .unwrap_or(0);
                let started = Start::ALL
                    .iter()
                    .position(|kind| *kind == started)
                    .unwrap_or(0);
                (top << 8) | (started << 16) | (leaf_frames.min(0xff) << 24)
            }
            How::Failed(failure) => {
                1 + WalkFailure::ALL
                    .iter()
                    .position(|kind| *kind == failure)
                    .unwrap_or(0)
            }
        }
    }

    fn of_number(number: usize) -> How {
        match number & 0xff {
            0 => How::Walked {
                top: TopFrame::ALL[((number >> 8) & 0xff) % TopFrame::ALL.len()],
                started: Start::ALL[((number >> 16) & 0xff) % Start::ALL.len()],
                leaf_frames: number >> 24,
            },
            failed => How::Failed(WalkFailure::ALL[(failed - 1) % WalkFailure::ALL.len()]),
        }
    }
}

/// How many examples of each kind a dump keeps, and how many leaf frames of each walk.
const EXAMPLES_PER_KIND: usize = 2;
const EXAMPLE_FRAMES: usize = 16;
/// How many agreeing frames an example keeps above the first that differs.
const EXAMPLE_FRAMES_ABOVE: usize = 3;

/// One example's place: free, being written by a signal handler, or ready for the dump. Only
/// atomics, so that a handler can fill it without a lock and the dump read it beside handlers.
struct ExampleSlot {
    state: AtomicU8,
    kind: AtomicUsize,
    /// The index, leaf 0, of the first frame kept of each walk.
    first: AtomicUsize,
    /// How ours walked ([`How::number`]).
    how: AtomicUsize,
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
            first: AtomicUsize::new(0),
            how: AtomicUsize::new(0),
            lengths: [const { AtomicUsize::new(0) }; 2],
            methods: [const { [const { AtomicUsize::new(0) }; EXAMPLE_FRAMES] }; 2],
            bcis: [const { [const { AtomicI32::new(0) }; EXAMPLE_FRAMES] }; 2],
        }
    }
}

static EXAMPLES: [[ExampleSlot; EXAMPLES_PER_KIND]; KINDS] =
    [const { [const { ExampleSlot::new() }; EXAMPLES_PER_KIND] }; KINDS];

/// Keeps a sample's two walks as an example of `kind` if the kind has a free place: from a
/// few frames above the first where they differ, so that deep stacks show their difference.
fn keep_example(kind: Comparison, how: How, ours: &[CallFrame], theirs: &[CallFrame]) {
    let Some(slot) = EXAMPLES[kind as usize].iter().find(|slot| {
        slot.state
            .compare_exchange(FREE, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }) else {
        return;
    };
    let differ = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a.method_id != b.method_id || a.lineno != b.lineno)
        .unwrap_or(ours.len().min(theirs.len()));
    let first = differ.saturating_sub(EXAMPLE_FRAMES_ABOVE);
    slot.kind.store(kind as usize, Ordering::Relaxed);
    slot.how.store(how.number(), Ordering::Relaxed);
    slot.first.store(first, Ordering::Relaxed);
    for (walk, frames) in [ours, theirs].into_iter().enumerate() {
        let frames = frames.get(first..).unwrap_or(&[]);
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
            first: example.first,
            vm_walk: example.how.text(),
            vm: example.ours.into_iter().map(&mut name).collect(),
            asgct: example.theirs.into_iter().map(&mut name).collect(),
        })
        .collect()
}

/// A disagreement kept by the check: its kind's name, and frames (method, bci) of our walk and
/// of AsyncGetCallTrace's from the `first` (the leaf is 0) on; a failed walk has none.
struct Example {
    kind: &'static str,
    first: usize,
    how: How,
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
            first: slot.first.load(Ordering::Relaxed),
            how: How::of_number(slot.how.load(Ordering::Relaxed)),
            ours: frames(0),
            theirs: frames(1),
        });
        slot.state.store(FREE, Ordering::Release);
    }
    examples
}

/// The bytecode index AsyncGetCallTrace gives a compiled frame whose pc has no debug point.
const NO_DEBUG_POINT_BCI: i32 = -1;

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
    if theirs.first().is_some_and(|their_top| {
        their_top.lineno == NO_DEBUG_POINT_BCI
            && ours[..leaf_scopes.max(1).min(ours.len())]
                .iter()
                .any(|ours| same_method(their_top, ours))
    }) {
        return Comparison::AsgctNoDebugPoint;
    }
    if methods_agree {
        return if ours.len() < theirs.len() {
            Comparison::OursShorter
        } else {
            Comparison::AsgctShorter
        };
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
    // One walk begins at a frame (method and bytecode index) below the other's top, and from
    // there the two agree.
    let begins_below = |longer: &[CallFrame], shorter: &[CallFrame]| {
        shorter.first().is_some_and(|top| {
            longer
                .iter()
                .skip(1)
                .position(|frame| same_method(frame, top) && frame.lineno == top.lineno)
                .is_some_and(|at| {
                    longer[at + 1..]
                        .iter()
                        .zip(shorter)
                        .all(|(a, b)| same_method(a, b))
                })
        })
    };
    if begins_below(ours, theirs) {
        return Comparison::AsgctMissingTop;
    }
    if begins_below(theirs, ours) {
        return Comparison::OursMissingTop;
    }
    // Below the leaf compiled frame's inlined methods, the walks agree if the frame that
    // called it (the first of ours below them, method and bytecode index) is in
    // AsyncGetCallTrace's below at least one frame, and all below it agree.
    let Some(caller) = ours.get(leaf_scopes.max(1)) else {
        return Comparison::OtherFrames;
    };
    // AsyncGetCallTrace's frames above the caller: its view of that compiled frame.
    let theirs_above = theirs
        .iter()
        .skip(1)
        .position(|frame| same_method(frame, caller) && frame.lineno == caller.lineno)
        .map(|at| at + 1);
    let below_agree = theirs_above.is_some_and(|above| {
        theirs[above..]
            .iter()
            .zip(&ours[leaf_scopes.max(1)..])
            .all(|(a, b)| same_method(a, b))
    });
    // More than one frame on either side: a compiled frame's inlined methods.
    if below_agree && (leaf_scopes > 1 || theirs_above > Some(1)) {
        Comparison::OtherInlinedLeaf
    } else {
        Comparison::OtherFrames
    }
}

/// The counts since the last call, by name: `check.<kind>`.
pub fn take_counts() -> Vec<(String, u64)> {
    Comparison::ALL
        .iter()
        .filter_map(|kind| {
            let count = COMPARISONS[*kind as usize].swap(0, Ordering::Relaxed);
            (count > 0).then(|| (format!("check.{}", kind.name()), count))
        })
        .collect()
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
    fn how_a_walk_went_survives_its_slot() {
        for how in [
            How::Walked {
                top: TopFrame::InterpreterEntry,
                started: Start::Native,
                leaf_frames: 7,
            },
            How::Walked {
                top: TopFrame::Compiled,
                started: Start::Interrupted,
                leaf_frames: 1,
            },
            How::Failed(WalkFailure::UnknownMethod),
            How::Failed(WalkFailure::NativeInJava),
        ] {
            assert_eq!(How::of_number(how.number()), how);
        }
        let how = How::Walked {
            top: TopFrame::CompiledExit,
            started: Start::Stub,
            leaf_frames: 2,
        };
        assert_eq!(how.text(), "compiled_exit/stub/2");
        assert_eq!(
            How::Failed(WalkFailure::StubOnTop).text(),
            "failed/stub_on_top"
        );
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
        assert_eq!(compare_frames(&a, &a[..3], 1), Comparison::OursShorter);
        assert_eq!(compare_frames(&a[..2], &a, 1), Comparison::AsgctShorter);
        // AsyncGetCallTrace at no debug point of ours' top compiled frame, lost below it.
        let mut lost = frames(&[1, 9]);
        lost[0].lineno = NO_DEBUG_POINT_BCI;
        assert_eq!(compare_frames(&lost, &a, 1), Comparison::AsgctNoDebugPoint);
        let mut lost = frames(&[2, 9]);
        lost[0].lineno = NO_DEBUG_POINT_BCI;
        assert_eq!(compare_frames(&lost, &a, 2), Comparison::AsgctNoDebugPoint);
        // The two leaf frames come from one compiled frame; AsyncGetCallTrace chose another
        // inlined scope there.
        let other_leaf = frames(&[9, 3, 4]);
        assert_eq!(
            compare_frames(&other_leaf, &a, 2),
            Comparison::OtherInlinedLeaf
        );
        // So when AsyncGetCallTrace has more of them, or fewer.
        assert_eq!(
            compare_frames(&frames(&[8, 9, 3, 4]), &a, 2),
            Comparison::OtherInlinedLeaf
        );
        assert_eq!(
            compare_frames(&frames(&[8, 3, 4]), &frames(&[6, 7, 9, 3, 4]), 3),
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
        assert_eq!(
            compare_frames(&frames(&[3, 4]), &frames(&[7, 8, 3, 4]), 1),
            Comparison::AsgctMissingTop
        );
        assert_eq!(
            compare_frames(&frames(&[7, 8, 3, 4]), &frames(&[3, 4]), 1),
            Comparison::OursMissingTop
        );
        let other = frames(&[1, 2, 8, 4]);
        assert_eq!(compare_frames(&a, &other, 1), Comparison::OtherFrames);
    }
}
