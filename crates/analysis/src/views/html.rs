//! The self-contained interactive flame graph and call tree: one HTML file with its own script,
//! holding the folded stacks of every event the profile has, so that the page switches event,
//! zooms, searches and reverses without the network.

use std::collections::HashMap;
use std::io::{self, Write};

use super::tree::CallTree;
use super::{fold, Folded, ViewFrame, ViewFrameKind, ViewOptions};
use crate::profile::{Event, Profile, Unit};

/// The page: markup, style and script, with the data and the title put in at the marks below.
const TEMPLATE: &str = include_str!("../../assets/flamegraph.html");
const DATA_MARK: &str = "/*OPENPROF_DATA*/";
const WHOLE_TREES_MARK: &str = "/*OPENPROF_WHOLE_TREES*/";
/// A page's tree of more nodes than this is written in two parts (see `write_data`): first cut
/// to about this many of its heaviest nodes, then whole after the page's script. A drawing
/// shows a few thousand nodes (those 0.3 pixel wide or more), so the cut tree is almost always
/// all the first drawing needs.
const HEAD_NODES: usize = 20_000;
const TITLE_MARK: &str = "<!--OPENPROF_TITLE-->";

/// Frame kinds in the order the page's data numbers them.
const KINDS: [ViewFrameKind; 9] = [
    ViewFrameKind::Java,
    ViewFrameKind::Jdk,
    ViewFrameKind::Inlined,
    ViewFrameKind::Native,
    ViewFrameKind::Marker,
    ViewFrameKind::AllocatedClass,
    ViewFrameKind::Thread,
    ViewFrameKind::MonitorClass,
    ViewFrameKind::ParkBlocker,
];

/// Writes the page: every event of the profile folded with the same options, the one asked for
/// (or the default) shown first.
pub fn write(profile: &Profile, options: &ViewOptions, out: &mut impl Write) -> io::Result<()> {
    write_page(profile, None, options, out)
}

/// Writes a differential page: `profile`'s stacks, each frame coloured by how its share of the
/// event changed from `base`'s (folded with the same options): red grew, blue shrank.
pub fn write_diff(
    profile: &Profile,
    base: &Profile,
    options: &ViewOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    write_page(profile, Some(base), options, out)
}

/// The page's data alone (the JSON `write_data` describes), for a page that has the component
/// already and swaps its data (the web UI's live view): the same folds as [`write`] or, with a
/// base, [`write_diff`].
pub fn page_data(
    profile: &Profile,
    base: Option<&Profile>,
    options: &ViewOptions,
) -> io::Result<Vec<u8>> {
    let (_, data, _) = folds_and_data(profile, base, options, false)?;
    Ok(data)
}

fn write_page(
    profile: &Profile,
    base: Option<&Profile>,
    options: &ViewOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    let (title, data, whole_trees) = folds_and_data(profile, base, options, true)?;
    let (head, tail) = TEMPLATE
        .split_once(DATA_MARK)
        .expect("the template has a data mark");
    let (middle, tail) = tail
        .split_once(WHOLE_TREES_MARK)
        .expect("the template has a mark for the whole trees");
    out.write_all(head.replace(TITLE_MARK, &escape_html(&title)).as_bytes())?;
    out.write_all(&data)?;
    out.write_all(middle.as_bytes())?;
    match whole_trees {
        Some(trees) => out.write_all(&trees)?,
        None => out.write_all(b"null")?,
    }
    out.write_all(tail.as_bytes())
}

/// The shown event's title, the page's data and, when `split` and the trees are large, the
/// whole trees apart.
fn folds_and_data(
    profile: &Profile,
    base: Option<&Profile>,
    options: &ViewOptions,
    split: bool,
) -> io::Result<(String, Vec<u8>, Option<Vec<u8>>)> {
    let shown = options.event.or_else(|| profile.default_event());
    let event_options = |event: Option<Event>| ViewOptions {
        event,
        ..options.clone()
    };
    let mut folds: Vec<Folded> = profile
        .events()
        .into_iter()
        .map(|event| fold(profile, &event_options(Some(event))))
        .collect();
    if folds.is_empty() {
        // No samples at all: the page says so under the title the view would have.
        folds.push(fold(profile, options));
    }
    // The base folded per event of the page; an event the base lacks folds to nothing.
    let base_folds: Option<Vec<Folded>> = base.map(|base| {
        folds
            .iter()
            .map(|folded| match folded.event {
                Some(event) => fold(base, &event_options(Some(event))),
                None => Folded::default(),
            })
            .collect()
    });
    if let Some(base) = base {
        if options.title.is_none() {
            for folded in &mut folds {
                folded.title = format!("{} vs {}", folded.title, base.source);
            }
        }
    }
    let mut data = Vec::new();
    let whole_trees = write_data(
        &folds,
        base_folds.as_deref(),
        shown,
        options,
        split,
        &mut data,
    )?;
    let title = folds
        .iter()
        .find(|folded| folded.event == shown)
        .unwrap_or(&folds[0])
        .title
        .clone();
    Ok((title, data, whole_trees))
}

/// The page's data, JSON:
/// `{"names": [...], "kinds": [...], "frameKinds": [...], "events": [{"name", "unit",
/// "total", "title", "tree", "base"?}], "shown", "reverse", "byThread", "minWidthPercent",
/// "diff"}`. Frames are one table for every event (and the base); a tree is its nodes in
/// preorder, four numbers each: frame (-1 for the root), total, self, number of children;
/// children heaviest first. A differential page's `base` is `{"total", "tree"}` of the base.
///
/// With `split` (a whole page, not a differential one), an event's tree of more than
/// `HEAD_NODES` nodes is cut to its nodes of at least `"headLeast"` (fewer than `HEAD_NODES`:
/// every node it leaves out weighs less than that), `"partial": true` says that some tree is,
/// and the whole trees are returned apart, `[tree or null]` by event, for the page to put after
/// its script: its first drawing needs only the cut trees where they hold every node wide
/// enough to be drawn, and it takes the whole ones once parsed.
fn write_data<'a>(
    folds: &'a [Folded],
    base_folds: Option<&'a [Folded]>,
    shown: Option<Event>,
    options: &ViewOptions,
    split: bool,
    out: &mut Vec<u8>,
) -> io::Result<Option<Vec<u8>>> {
    let mut frames: Vec<&'a ViewFrame> = Vec::new();
    let mut frame_ids: HashMap<&'a ViewFrame, u32> = HashMap::new();
    let mut tree_of = |folded: &'a Folded| {
        let local: Vec<u32> = folded
            .frames
            .iter()
            .map(|frame| {
                *frame_ids.entry(frame).or_insert_with(|| {
                    frames.push(frame);
                    (frames.len() - 1) as u32
                })
            })
            .collect();
        CallTree::of(folded, &local, options.min_width_percent)
    };
    let trees: Vec<CallTree> = folds.iter().map(&mut tree_of).collect();
    let base_trees: Option<Vec<CallTree>> =
        base_folds.map(|base_folds| base_folds.iter().map(&mut tree_of).collect());
    out.write_all(b"{\"names\":[")?;
    for (index, frame) in frames.iter().enumerate() {
        if index > 0 {
            out.write_all(b",")?;
        }
        write_json_string(&frame.label(), out)?;
    }
    out.write_all(b"],\"kinds\":[")?;
    for (index, kind) in KINDS.iter().enumerate() {
        if index > 0 {
            out.write_all(b",")?;
        }
        write!(out, "\"{}\"", kind.name())?;
    }
    out.write_all(b"],\"frameKinds\":[")?;
    for (index, frame) in frames.iter().enumerate() {
        if index > 0 {
            out.write_all(b",")?;
        }
        let kind = KINDS
            .iter()
            .position(|kind| *kind == frame.kind)
            .unwrap_or(0);
        write!(out, "{kind}")?;
    }
    let head_least: Vec<u64> = trees
        .iter()
        .map(|tree| match split && base_trees.is_none() {
            true => head_least(tree),
            false => 0,
        })
        .collect();
    let partial = head_least.iter().any(|least| *least > 0);
    out.write_all(b"],\"events\":[")?;
    for (index, (folded, tree)) in folds.iter().zip(&trees).enumerate() {
        if index > 0 {
            out.write_all(b",")?;
        }
        out.write_all(b"{\"name\":")?;
        write_json_string(folded.event.map_or("none", Event::name), out)?;
        out.write_all(b",\"unit\":")?;
        write_json_string(weight_unit(folded.event, options.total), out)?;
        write!(out, ",\"total\":{},\"title\":", folded.total)?;
        write_json_string(&folded.title, out)?;
        out.write_all(b",\"tree\":[")?;
        write_preorder(tree, head_least[index], out)?;
        out.write_all(b"]")?;
        if head_least[index] > 0 {
            write!(out, ",\"headLeast\":{}", head_least[index])?;
        }
        if let (Some(base_folds), Some(base_trees)) = (base_folds, &base_trees) {
            write!(
                out,
                ",\"base\":{{\"total\":{},\"tree\":[",
                base_folds[index].total
            )?;
            write_preorder(&base_trees[index], 0, out)?;
            out.write_all(b"]}")?;
        }
        out.write_all(b"}")?;
    }
    out.write_all(b"],\"shown\":")?;
    write_json_string(shown.map_or("none", Event::name), out)?;
    let min_width = if options.min_width_percent.is_finite() {
        options.min_width_percent
    } else {
        0.0
    };
    write!(
        out,
        ",\"reverse\":{},\"byThread\":{},\"minWidthPercent\":{min_width},\"diff\":{},\"partial\":{partial}}}",
        options.reverse,
        options.by_thread,
        base_folds.is_some()
    )?;
    if !partial {
        return Ok(None);
    }
    let mut whole = Vec::new();
    whole.write_all(b"[")?;
    for (index, tree) in trees.iter().enumerate() {
        if index > 0 {
            whole.write_all(b",")?;
        }
        if head_least[index] > 0 {
            whole.write_all(b"[")?;
            write_preorder(tree, 0, &mut whole)?;
            whole.write_all(b"]")?;
        } else {
            whole.write_all(b"null")?;
        }
    }
    whole.write_all(b"]")?;
    Ok(Some(whole))
}

/// What a view's weights count: the event's unit when weighed by value, else samples (sampled
/// events) or how many events.
fn weight_unit(event: Option<Event>, by_value: bool) -> &'static str {
    match event.map(Event::unit) {
        Some(unit) if by_value => unit.name(),
        Some(Unit::Samples) | None => "samples",
        Some(_) => "count",
    }
}

/// The least total of the nodes a cut of `tree` keeps (fewer than `HEAD_NODES` of them, and
/// every parent of a node kept, whose total is no less), or 0 for a tree kept whole.
fn head_least(tree: &CallTree) -> u64 {
    if tree.nodes.len() <= HEAD_NODES {
        return 0;
    }
    let mut totals: Vec<u64> = tree.nodes.iter().map(|node| node.total).collect();
    let (_, cut, _) = totals.select_nth_unstable_by(HEAD_NODES, |a, b| b.cmp(a));
    // A cut that would leave out the root (a chain of equal nodes) keeps the tree whole.
    if *cut >= tree.nodes[0].total {
        return 0;
    }
    *cut + 1
}

/// The call tree's nodes of at least `least` in preorder, without recursion (stacks may be
/// thousands of frames deep): frame (-1 for the root), total, self, number of children written.
fn write_preorder(tree: &CallTree, least: u64, out: &mut impl Write) -> io::Result<()> {
    let mut pending = vec![0usize];
    let mut first = true;
    let kept = |child: &&usize| tree.nodes[**child].total >= least;
    while let Some(index) = pending.pop() {
        let node = &tree.nodes[index];
        if !first {
            out.write_all(b",")?;
        }
        first = false;
        match node.frame {
            Some(frame) => write!(out, "{frame}")?,
            None => out.write_all(b"-1")?,
        }
        let children = node.children.iter().filter(kept).count();
        write!(out, ",{},{},{children}", node.total, node.self_weight)?;
        // Children are heaviest first: the kept ones lead.
        pending.extend(node.children[..children].iter().rev());
    }
    Ok(())
}

/// A JSON string that is safe inside the page's script element: `<` escaped so that no name
/// can close the element.
fn write_json_string(text: &str, out: &mut impl Write) -> io::Result<()> {
    let json = serde_json::to_string(text).map_err(io::Error::other)?;
    out.write_all(json.replace('<', "\\u003c").as_bytes())
}

fn escape_html(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for char in text.chars() {
        match char {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            _ => escaped.push(char),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, FrameKind, Sample};

    fn profile() -> Profile {
        let mut profile = Profile::new("test<script>");
        let hot = profile.stack_of_frames_leaf_first([
            Frame::java("Hot.spin</script>"),
            Frame::java("java.lang.Thread.run"),
        ]);
        let cold = profile.stack_of_frames_leaf_first([
            Frame::java("Hot.rest"),
            Frame::java("java.lang.Thread.run"),
        ]);
        let bytes = profile.stack_of_frames_leaf_first([
            Frame {
                name: "byte[]".into(),
                file: None,
                line: None,
                kind: FrameKind::AllocatedClass,
            },
            Frame::java("Hot.rest"),
        ]);
        for (stack, event, value, count) in [
            (hot, Event::Cpu, 99, 99),
            (cold, Event::Cpu, 1, 1),
            (bytes, Event::AllocBytes, 4096, 2),
        ] {
            profile.add_sample(Sample {
                stack,
                event,
                value,
                count,
                thread: None,
                time_ns: None,
                labels: Vec::new(),
            });
        }
        profile
    }

    fn page(options: &ViewOptions) -> String {
        let mut out = Vec::new();
        write(&profile(), options, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn page_data(page: &str) -> serde_json::Value {
        let start = page.find("id=\"openprof-data\">").unwrap() + "id=\"openprof-data\">".len();
        let end = start + page[start..].find("</script>").unwrap();
        serde_json::from_str(&page[start..end]).unwrap()
    }

    fn tree(data: &serde_json::Value, event: usize) -> Vec<u64> {
        data["events"][event]["tree"]
            .as_array()
            .unwrap()
            .iter()
            .map(|number| number.as_i64().unwrap() as u64)
            .collect()
    }

    fn frame_index(data: &serde_json::Value, name: &str) -> u64 {
        data["names"]
            .as_array()
            .unwrap()
            .iter()
            .position(|n| n == name)
            .unwrap() as u64
    }

    #[test]
    fn every_event_as_a_preorder_tree() {
        let page = page(&ViewOptions::default());
        let data = page_data(&page);
        assert_eq!(data["shown"], "cpu");
        assert_eq!(data["events"][0]["name"], "cpu");
        assert_eq!(data["events"][0]["total"], 100);
        assert_eq!(data["events"][1]["name"], "alloc_bytes");
        assert_eq!(data["events"][1]["unit"], "count");
        assert_eq!(data["events"][1]["total"], 2);
        let [run, spin, rest] = ["java.lang.Thread.run", "Hot.spin</script>", "Hot.rest"]
            .map(|name| frame_index(&data, name));
        // root, run (99 + 1), spin heavier than rest.
        assert_eq!(
            tree(&data, 0),
            [
                u64::MAX,
                100,
                0,
                1,
                run,
                100,
                0,
                2,
                spin,
                99,
                99,
                0,
                rest,
                1,
                1,
                0
            ]
        );
        // Hot.rest is one frame of both events' table.
        assert_eq!(tree(&data, 1)[4], rest);
        assert_eq!(data["frameKinds"][run as usize], 1, "jdk");
    }

    #[test]
    fn names_cannot_close_the_script_and_title_is_escaped() {
        let page = page(&ViewOptions::default());
        assert_eq!(page.matches("</script>").count(), 3);
        assert!(page.contains("<title>test&lt;script&gt; (cpu)</title>"));
        assert!(page.contains("<h1 id=\"title\">test&lt;script&gt; (cpu)</h1>"));
    }

    /// `stacks` stacks `main;groupG;leafI` under 100 groups, each weighing 1 to 13.
    fn wide_profile(stacks: u64) -> Profile {
        let mut profile = Profile::new("wide");
        for index in 0..stacks {
            let stack = profile.stack_of_frames_leaf_first([
                Frame::java(format!("app.Leaf.leaf{index}")),
                Frame::java(format!("app.Group.group{}", index % 100)),
                Frame::java("app.Main.main"),
            ]);
            let weight = index % 13 + 1;
            profile.add_sample(Sample {
                stack,
                event: Event::Cpu,
                value: weight,
                count: weight,
                thread: None,
                time_ns: None,
                labels: Vec::new(),
            });
        }
        profile
    }

    /// A preorder's nodes as (frame, total, self), and the number of children it states.
    fn nodes_of(numbers: &[u64]) -> (Vec<[u64; 3]>, u64) {
        let nodes = numbers.chunks(4).map(|n| [n[0], n[1], n[2]]).collect();
        (nodes, numbers.chunks(4).map(|n| n[3]).sum())
    }

    #[test]
    fn a_large_page_carries_its_heaviest_nodes_first_and_its_whole_tree_after_the_script() {
        let profile = wide_profile(30_000);
        let mut out = Vec::new();
        write(&profile, &ViewOptions::default(), &mut out).unwrap();
        let page = String::from_utf8(out).unwrap();
        let data = page_data(&page);
        assert_eq!(data["partial"], true);
        let least = data["events"][0]["headLeast"].as_u64().unwrap();
        let marker = "id=\"openprof-whole-trees\">";
        let start = page.find(marker).unwrap() + marker.len();
        let end = start + page[start..].find("</script>").unwrap();
        assert!(
            page[..start].contains("window.openprofFlame"),
            "after the script"
        );
        let whole: serde_json::Value = serde_json::from_str(&page[start..end]).unwrap();
        let whole_tree: Vec<u64> = whole[0]
            .as_array()
            .unwrap()
            .iter()
            .map(|number| number.as_i64().unwrap() as u64)
            .collect();
        // The whole tree is the one a page without the cut carries (the web UI's data).
        let unsplit: serde_json::Value = serde_json::from_slice(
            &super::page_data(&profile, None, &ViewOptions::default()).unwrap(),
        )
        .unwrap();
        assert_eq!(unsplit["partial"], false);
        assert_eq!(whole_tree, tree(&unsplit, 0));
        // The cut: fewer than HEAD_NODES nodes, exactly the whole tree's of at least `least`,
        // in the same order, each stating the children it kept.
        let (cut, cut_children) = nodes_of(&tree(&data, 0));
        let (all, _) = nodes_of(&whole_tree);
        assert_eq!(all.len(), 1 + 1 + 100 + 30_000);
        assert!(
            cut.len() < HEAD_NODES && cut.len() > HEAD_NODES / 2,
            "{}",
            cut.len()
        );
        let expected: Vec<[u64; 3]> = all.into_iter().filter(|n| n[1] >= least).collect();
        assert_eq!(cut, expected);
        assert_eq!(cut_children + 1, cut.len() as u64);
    }

    #[test]
    fn a_chain_of_equal_nodes_is_not_cut() {
        let mut profile = Profile::new("deep");
        let frames: Vec<Frame> = (0..25_000)
            .map(|level| Frame::java(format!("app.Deep.level{level}")))
            .collect();
        let stack = profile.stack_of_frames_leaf_first(frames);
        profile.add_sample(Sample {
            stack,
            event: Event::Cpu,
            value: 1,
            count: 1,
            thread: None,
            time_ns: None,
            labels: Vec::new(),
        });
        let mut out = Vec::new();
        write(&profile, &ViewOptions::default(), &mut out).unwrap();
        let data = page_data(&String::from_utf8(out).unwrap());
        assert_eq!(data["partial"], false);
        assert_eq!(tree(&data, 0).len(), 4 * 25_001);
    }

    #[test]
    fn a_profile_without_samples_is_an_empty_page() {
        let mut out = Vec::new();
        write(&Profile::new("empty"), &ViewOptions::default(), &mut out).unwrap();
        let data = page_data(&String::from_utf8(out).unwrap());
        assert_eq!(data["shown"], "none");
        assert_eq!(data["events"][0]["name"], "none");
        assert_eq!(tree(&data, 0), [u64::MAX, 0, 0, 0]);
    }

    #[test]
    fn a_diff_carries_the_base_of_each_event() {
        let mut base = Profile::new("base");
        let rest = base.stack_of_frames_leaf_first([
            Frame::java("Hot.rest"),
            Frame::java("java.lang.Thread.run"),
        ]);
        let gone = base.stack_of_frames_leaf_first([Frame::java("Old.gone")]);
        for (stack, count) in [(rest, 3), (gone, 1)] {
            base.add_sample(Sample::counted(stack, Event::Cpu, count));
        }
        let mut out = Vec::new();
        write_diff(&profile(), &base, &ViewOptions::default(), &mut out).unwrap();
        let data = page_data(&String::from_utf8(out).unwrap());
        assert_eq!(data["diff"], true);
        assert_eq!(data["events"][0]["title"], "test<script> (cpu) vs base");
        assert_eq!(data["events"][0]["base"]["total"], 4);
        let [run, rest, gone] =
            ["java.lang.Thread.run", "Hot.rest", "Old.gone"].map(|name| frame_index(&data, name));
        let base_tree: Vec<u64> = data["events"][0]["base"]["tree"]
            .as_array()
            .unwrap()
            .iter()
            .map(|number| number.as_i64().unwrap() as u64)
            .collect();
        assert_eq!(
            base_tree,
            [
                u64::MAX,
                4,
                0,
                2,
                run,
                3,
                0,
                1,
                rest,
                3,
                3,
                0,
                gone,
                1,
                1,
                0
            ]
        );
        // The base has no allocations: that event's base is empty.
        assert_eq!(data["events"][1]["base"]["total"], 0);
        let plain = page_data(&self::page(&ViewOptions::default()));
        assert_eq!(plain["diff"], false);
    }

    #[test]
    fn narrow_frames_left_out() {
        let data = page_data(&page(&ViewOptions {
            min_width_percent: 2.0,
            event: Some(Event::AllocBytes),
            ..ViewOptions::default()
        }));
        assert_eq!(data["shown"], "alloc_bytes");
        assert_eq!(data["minWidthPercent"], 2.0);
        // Hot.rest (1 of 100) is gone, its weight still in its caller's total.
        let [run, spin] =
            ["java.lang.Thread.run", "Hot.spin</script>"].map(|name| frame_index(&data, name));
        assert_eq!(tree(&data, 0)[4..], [run, 100, 0, 1, spin, 99, 99, 0]);
    }
}
