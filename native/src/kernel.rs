//! The frame builder's per-sample loop for one-sample series in columns
//! (`FrameBuilder.add_batch`), on the builder's own Python state.
//!
//! It is a fast path, not a second builder: it reads and writes the very objects the
//! Python loop does (the label memo's resolved tuples, the series state lists, the
//! nodes' slots, the open partials' dicts) and takes only the samples whose outcome is
//! plain -- a memoised series already tracked, on its scrape target's phase window, its
//! node settled in its group with this bucket's partial at hand, a finite value newer
//! than the last. It stops at the first sample that is anything else *before* touching
//! any state, and the Python loop -- the reference -- takes that one sample whole; the
//! builder then calls again from the next. So the frames are the Python loop's by
//! construction (tests/unit/test_builder_batch.py holds the two side by side).

use pyo3::buffer::PyBuffer;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyList, PyTuple};

/// The fields of a `_Node` the loop reads, fetched once per run of its samples.
struct NodeView<'py> {
    ptr: *mut ffi::PyObject,
    obj: Bound<'py, PyAny>,
    assigned: bool,
    rank: i64,
    group: Bound<'py, PyAny>,
    held: i64,
    call: i64,
    bucket: i64,
    parts: Bound<'py, PyAny>,
    role: Bound<'py, PyAny>,
}

impl<'py> NodeView<'py> {
    fn of(py: Python<'py>, node: Bound<'py, PyAny>) -> PyResult<Self> {
        Ok(NodeView {
            ptr: node.as_ptr(),
            assigned: !node.getattr(intern!(py, "assigned"))?.is_none(),
            rank: node.getattr(intern!(py, "rank"))?.extract()?,
            group: node.getattr(intern!(py, "group"))?,
            held: node.getattr(intern!(py, "held"))?.extract()?,
            call: node.getattr(intern!(py, "call"))?.extract()?,
            bucket: node.getattr(intern!(py, "bucket"))?.extract()?,
            parts: node.getattr(intern!(py, "parts"))?,
            role: node.getattr(intern!(py, "role"))?,
            obj: node,
        })
    }
}

/// A `ScrapeTarget`'s on-phase window of its latest round, and its phase.
struct ScrapeView<'py> {
    ptr: *mut ffi::PyObject,
    obj: Bound<'py, PyAny>,
    lo: i64,
    hi: i64,
    bucket: i64,
    /// None until the phase is learned
    shift: Option<i64>,
    ok_ts: i64,
}

/// What does not change in a run: the builder's constants and its dicts.
struct Run<'a, 'py> {
    memo: &'a Bound<'py, PyDict>,
    series: &'a Bound<'py, PyDict>,
    open: &'a Bound<'py, PyDict>,
    call: i64,
    future_limit: i64,
    hold_ms: i64,
    late_lag: i64,
    /// `ScrapePhases`' bucket_ms, low, high
    phase: (i64, i64, i64),
}

/// What the loop made of a stretch of samples.
#[derive(Default)]
struct Tally<'py> {
    accepted: usize,
    unknown: usize,
    /// the int of the last timestamp stored: a scrape's series share their timestamp
    ts_obj: Option<(i64, Bound<'py, PyAny>)>,
}

#[pyclass(module = "peerwatch_native")]
pub struct AddKernel {}

#[pymethods]
impl AddKernel {
    #[new]
    fn new() -> Self {
        AddKernel {}
    }

    /// Samples `start..` of a batch, as `FrameBuilder._add_pairs` would take them, up to
    /// the first the Python loop must take: `(stop, end, max_ts, accepted, unknown)` --
    /// `stop` is that sample's index (`len(labels)`: all done), `stop..end` the samples to
    /// hand the Python loop at once (the run of a node in no group: all of them wait in
    /// Python), `max_ts` the newest sample time. `phase` is `ScrapePhases`' (bucket_ms,
    /// low, high).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (labels, timestamps, values, start, memo, series, open, call, max_ts, future_limit, hold_ms, late_lag, phase))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        labels: &Bound<'py, PyList>,
        timestamps: &Bound<'py, PyAny>,
        values: &Bound<'py, PyAny>,
        start: usize,
        memo: &Bound<'py, PyDict>,
        series: &Bound<'py, PyDict>,
        open: &Bound<'py, PyDict>,
        call: i64,
        max_ts: Option<i64>,
        future_limit: Option<i64>,
        hold_ms: i64,
        late_lag: i64,
        phase: (i64, i64, i64),
    ) -> PyResult<(usize, usize, Option<i64>, usize, usize)> {
        let ts_buf = PyBuffer::<i64>::get(timestamps)?;
        let value_buf = PyBuffer::<f64>::get(values)?;
        let (Some(ts_col), Some(value_col)) = (ts_buf.as_slice(py), value_buf.as_slice(py)) else {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "timestamps and values must be C-contiguous int64 and float64",
            ));
        };
        let n = labels.len();
        if ts_col.len() != n || value_col.len() != n {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "labels, timestamps and values differ in length",
            ));
        }
        if phase.0 <= 0 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "bucket_ms must be > 0",
            ));
        }
        let run = Run {
            memo,
            series,
            open,
            call,
            future_limit: future_limit.unwrap_or(i64::MAX),
            hold_ms,
            late_lag,
            phase,
        };
        let mut max_ts = max_ts;
        let mut tally = Tally::default();
        let mut node: Option<NodeView<'py>> = None;
        let mut scrape: Option<ScrapeView<'py>> = None;
        let mut i = start;
        while i < n {
            // SAFETY: i < n = len(labels); the list is not resized while the GIL is held
            let label_dict = unsafe { labels.get_item_unchecked(i) };
            let (ts, value) = (ts_col[i].get(), value_col[i].get());
            let taken = sample(
                py,
                &run,
                &label_dict,
                ts,
                value,
                &mut max_ts,
                &mut node,
                &mut scrape,
                &mut tally,
            )?;
            if !taken {
                break;
            }
            i += 1;
        }
        let mut end = (i + 1).min(n);
        if i < n {
            // SAFETY: indices < n = len(labels)
            let groupless =
                |j: usize| groupless_node(py, memo, &unsafe { labels.get_item_unchecked(j) });
            if let Some(node) = groupless(i)? {
                while end < n && groupless(end)? == Some(node) {
                    end += 1;
                }
            }
        }
        Ok((i, end, max_ts, tally.accepted, tally.unknown))
    }
}

/// The node of a memoised label dict if that node is in no group, else None; reads only.
fn groupless_node(
    py: Python<'_>,
    memo: &Bound<'_, PyDict>,
    label_dict: &Bound<'_, PyAny>,
) -> PyResult<Option<usize>> {
    // SAFETY: the GIL is held; `seen` is borrowed from the memo, unchanged while used
    unsafe {
        let id =
            Bound::from_owned_ptr_or_err(py, ffi::PyLong_FromVoidPtr(label_dict.as_ptr().cast()))?;
        let seen = ffi::PyDict_GetItemWithError(memo.as_ptr(), id.as_ptr());
        if seen.is_null() {
            if !ffi::PyErr_Occurred().is_null() {
                return Err(PyErr::fetch(py));
            }
            return Ok(None);
        }
        if ffi::PyTuple_CheckExact(seen) == 0
            || ffi::PyTuple_GET_SIZE(seen) != 14
            || ffi::PyTuple_GET_ITEM(seen, 0) != label_dict.as_ptr()
        {
            return Ok(None);
        }
        let node = ffi::PyTuple_GET_ITEM(seen, 1);
        if node == ffi::Py_None() {
            return Ok(None);
        }
        let node = Bound::from_borrowed_ptr(py, node);
        if !node.getattr(intern!(py, "group"))?.is_none() {
            return Ok(None);
        }
        Ok(Some(node.as_ptr() as usize))
    }
}

/// An int's value, or None (not an int, or out of range).
///
/// SAFETY: `o` is a live object; the GIL is held.
unsafe fn int_of(o: *mut ffi::PyObject) -> Option<i64> {
    if ffi::PyLong_Check(o) == 0 {
        return None;
    }
    let v = ffi::PyLong_AsLongLong(o);
    if v == -1 && !ffi::PyErr_Occurred().is_null() {
        ffi::PyErr_Clear();
        return None;
    }
    Some(v)
}

/// `a != b` as Python's `!=` says, for the str / None fields of labels and nodes.
///
/// SAFETY: both are live objects; the GIL is held.
unsafe fn differ(py: Python<'_>, a: *mut ffi::PyObject, b: *mut ffi::PyObject) -> PyResult<bool> {
    if a == b {
        return Ok(false);
    }
    match ffi::PyObject_RichCompareBool(a, b, ffi::Py_NE) {
        -1 => Err(PyErr::fetch(py)),
        r => Ok(r == 1),
    }
}

/// `parts[slot][key] = value` for each slot of the tuple `slots`.
///
/// SAFETY: `parts` is a list, `slots` a tuple, `key` and `value` live; the GIL is held.
unsafe fn store(
    py: Python<'_>,
    parts: *mut ffi::PyObject,
    slots: *mut ffi::PyObject,
    key: *mut ffi::PyObject,
    value: *mut ffi::PyObject,
) -> PyResult<()> {
    let size = ffi::PyList_GET_SIZE(parts);
    for j in 0..ffi::PyTuple_GET_SIZE(slots) {
        let slot = ffi::PyLong_AsSsize_t(ffi::PyTuple_GET_ITEM(slots, j));
        if !(0..size).contains(&slot) {
            if ffi::PyErr_Occurred().is_null() {
                return Err(pyo3::exceptions::PyIndexError::new_err("slot out of range"));
            }
            return Err(PyErr::fetch(py));
        }
        let contributions = ffi::PyList_GET_ITEM(parts, slot);
        if ffi::PyDict_Check(contributions) == 0 {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a partial's slot is not a dict",
            ));
        }
        if ffi::PyDict_SetItem(contributions, key, value) < 0 {
            return Err(PyErr::fetch(py));
        }
    }
    Ok(())
}

/// One sample through the fast path: false (and nothing changed) if the Python loop must
/// take it.
#[allow(clippy::too_many_arguments)]
fn sample<'py>(
    py: Python<'py>,
    run: &Run<'_, 'py>,
    label_dict: &Bound<'py, PyAny>,
    ts: i64,
    value: f64,
    max_ts: &mut Option<i64>,
    node_view: &mut Option<NodeView<'py>>,
    scrape_view: &mut Option<ScrapeView<'py>>,
    tally: &mut Tally<'py>,
) -> PyResult<bool> {
    // SAFETY (the whole function): the GIL is held; every borrowed pointer comes from a
    // container (memo entry, resolved tuple, state list) that outlives its use here, and
    // nothing below runs Python code that could change them (str / int / tuple keys, member
    // slots, exact floats) before the pointer's last use.
    unsafe {
        // memo key: id(labels)
        let id =
            Bound::from_owned_ptr_or_err(py, ffi::PyLong_FromVoidPtr(label_dict.as_ptr().cast()))?;
        let seen = ffi::PyDict_GetItemWithError(run.memo.as_ptr(), id.as_ptr());
        drop(id);
        if seen.is_null() {
            if !ffi::PyErr_Occurred().is_null() {
                return Err(PyErr::fetch(py));
            }
            return Ok(false);
        }
        if ffi::PyTuple_CheckExact(seen) == 0 || ffi::PyTuple_GET_SIZE(seen) != 14 {
            return Ok(false);
        }
        let item = |k: isize| ffi::PyTuple_GET_ITEM(seen, k);
        let none = ffi::Py_None();
        if item(0) != label_dict.as_ptr() {
            return Ok(false); // an id reused by another dict: the Python loop resolves it
        }
        let node = item(1);
        if node == none {
            let drop = item(2);
            if ffi::PyUnicode_CheckExact(drop) == 0 || ffi::PyUnicode_GET_LENGTH(drop) != 0 {
                return Ok(false); // a drop the Python loop counts by its reason
            }
            tally.unknown += 1;
            return Ok(true);
        }
        if item(13) != none {
            return Ok(false); // an HA replica's series
        }
        if (4..8).any(|k| ffi::PyTuple_CheckExact(item(k)) == 0) {
            return Ok(false); // slots the Python loop would fail on alike
        }
        // the round: the target's on-phase window of its latest round, or its phase
        let scrape = item(9);
        if scrape_view.as_ref().is_none_or(|v| v.ptr != scrape) {
            let scrape = Bound::from_borrowed_ptr(py, scrape);
            let shift = scrape.getattr(intern!(py, "shift"))?;
            *scrape_view = Some(ScrapeView {
                ptr: scrape.as_ptr(),
                lo: scrape.getattr(intern!(py, "lo"))?.extract()?,
                hi: scrape.getattr(intern!(py, "hi"))?.extract()?,
                bucket: scrape.getattr(intern!(py, "bucket"))?.extract()?,
                shift: if shift.is_none() {
                    None
                } else {
                    Some(shift.extract()?)
                },
                ok_ts: scrape.getattr(intern!(py, "ok_ts"))?.extract()?,
                obj: scrape,
            });
        }
        let window = scrape_view.as_mut().expect("just set");
        let mut new_round = false;
        let bucket = if window.lo <= ts && ts <= window.hi {
            window.bucket
        } else {
            // ScrapePhases.bucket's on-phase case; learning and off-phase are the Python loop's
            let Some(shift) = window.shift else {
                return Ok(false);
            };
            let (bucket_ms, low, high) = run.phase;
            let d = ts + shift;
            let offset = d.rem_euclid(bucket_ms);
            if !(low <= offset && offset <= high) {
                return Ok(false);
            }
            new_round = ts > window.ok_ts;
            d - offset
        };
        if node_view.as_ref().is_none_or(|v| v.ptr != node) {
            *node_view = Some(NodeView::of(py, Bound::from_borrowed_ptr(py, node))?);
        }
        let nv = node_view.as_mut().expect("just set");
        if nv.assigned || nv.group.is_none() || ffi::PyList_CheckExact(nv.parts.as_ptr()) == 0 {
            return Ok(false);
        }
        let Some(rank) = int_of(item(10)) else {
            return Ok(false);
        };
        let mut held = false;
        if rank == nv.rank {
            if differ(py, item(11), nv.group.as_ptr())? {
                return Ok(false); // another job: a move
            }
            held = bucket > nv.held;
        } else if rank < nv.rank || bucket - nv.held > run.hold_ms {
            return Ok(false); // a label that outranks the node's, or the hold ran out
        }
        let role = item(12);
        if role != none && differ(py, role, nv.role.as_ptr())? {
            return Ok(false);
        }
        if ts > run.future_limit || !value.is_finite() {
            return Ok(false);
        }
        let key = item(2);
        let state = ffi::PyDict_GetItemWithError(run.series.as_ptr(), key);
        if state.is_null() {
            if !ffi::PyErr_Occurred().is_null() {
                return Err(PyErr::fetch(py));
            }
            return Ok(false); // a new series: the limits decide
        }
        if ffi::PyList_CheckExact(state) == 0 || ffi::PyList_GET_SIZE(state) < 2 {
            return Ok(false);
        }
        let Some(last_ts) = int_of(ffi::PyList_GET_ITEM(state, 0)) else {
            return Ok(false);
        };
        if ts <= last_ts {
            return Ok(false); // a duplicate or out of order
        }
        if let Some(m) = *max_ts {
            if bucket <= m.saturating_sub(run.late_lag) {
                return Ok(false);
            }
        }
        let last_value = ffi::PyList_GET_ITEM(state, 1);
        let previous = if last_value == none {
            None
        } else if ffi::PyFloat_CheckExact(last_value) != 0 {
            Some(ffi::PyFloat_AS_DOUBLE(last_value))
        } else {
            return Ok(false); // an int the caller added: Python's arithmetic, not ours
        };
        // the node's partial for this bucket: at hand, or open already (else the Python loop
        // opens or reopens it)
        let partial_parts = if nv.call == run.call && nv.bucket == bucket {
            None
        } else {
            let Some(frames) = run.open.get_item(bucket)? else {
                return Ok(false);
            };
            let name = nv.obj.getattr(intern!(py, "name"))?;
            let Some(partial) = frames.downcast::<PyDict>()?.get_item(name)? else {
                return Ok(false);
            };
            let parts = partial.getattr(intern!(py, "parts"))?;
            if ffi::PyList_CheckExact(parts.as_ptr()) == 0 {
                return Ok(false);
            }
            Some(parts)
        };

        // --- taken: from here on, state changes exactly as the Python loop changes it ---
        if new_round {
            let (_, low, high) = run.phase;
            let shift = window.shift.expect("on phase");
            let target = &window.obj;
            target.setattr(intern!(py, "ok_ts"), ts)?;
            target.setattr(intern!(py, "bucket"), bucket)?;
            target.setattr(intern!(py, "lo"), bucket - shift + low)?;
            target.setattr(intern!(py, "hi"), bucket - shift + high)?;
            (window.ok_ts, window.bucket) = (ts, bucket);
            (window.lo, window.hi) = (bucket - shift + low, bucket - shift + high);
        }
        if held {
            nv.obj.setattr(intern!(py, "held"), bucket)?;
            nv.held = bucket;
        }
        if let Some(parts) = partial_parts {
            nv.obj.setattr(intern!(py, "call"), run.call)?;
            nv.obj.setattr(intern!(py, "bucket"), bucket)?;
            nv.obj.setattr(intern!(py, "parts"), &parts)?;
            (nv.call, nv.bucket, nv.parts) = (run.call, bucket, parts);
        }
        let rate = previous.map(|p| {
            // a counter that went down was restarted from 0: all of it is increase
            let increase = if value >= p { value - p } else { value };
            increase * 1000.0 / ((ts - last_ts) as f64)
        });
        let ts_obj = match &tally.ts_obj {
            Some((t, obj)) if *t == ts => obj.clone(),
            _ => {
                let obj = Bound::from_owned_ptr_or_err(py, ffi::PyLong_FromLongLong(ts))?;
                tally.ts_obj = Some((ts, obj.clone()));
                obj
            }
        };
        let value_obj = PyFloat::new(py, value);
        // PyList_SetItem steals the new reference and releases the old item
        ffi::PyList_SetItem(state, 0, ts_obj.into_ptr());
        ffi::PyList_SetItem(state, 1, value_obj.clone().into_ptr());
        if max_ts.is_none_or(|m| ts > m) {
            *max_ts = Some(ts);
        }
        tally.accepted += 1;

        let parts = nv.parts.as_ptr();
        let gpu = Bound::from_borrowed_ptr(py, item(3));
        let value_slots = item(4);
        if ffi::PyTuple_GET_SIZE(value_slots) > 0 {
            let pair = atoms(py, &value_obj, &gpu)?;
            store(py, parts, value_slots, key, pair.as_ptr())?;
        }
        if let Some(rate) = rate {
            let rate_obj = PyFloat::new(py, rate);
            let (rate_slots, num_slots, den_slots) = (item(5), item(6), item(7));
            let pair_key = item(8);
            if ffi::PyTuple_GET_SIZE(rate_slots) > 0 || ffi::PyTuple_GET_SIZE(num_slots) > 0 {
                let pair = atoms(py, &rate_obj, &gpu)?;
                store(py, parts, rate_slots, key, pair.as_ptr())?;
                store(py, parts, num_slots, pair_key, pair.as_ptr())?;
            }
            store(py, parts, den_slots, pair_key, rate_obj.as_ptr())?;
        }
        Ok(true)
    }
}

/// `(value, gpu)`, untracked by the cyclic collector: a float and a str (or None) cannot be
/// in a cycle, and CPython's collector would untrack the tuple at its first pass anyway --
/// tracked, it would also make the partial's dict it goes into tracked, and every
/// collection until the frame closes would walk both.
fn atoms<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyFloat>,
    gpu: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let pair = PyTuple::new(py, [value.as_any(), gpu])?;
    if gpu.is_none() || gpu.is_exact_instance_of::<pyo3::types::PyString>() {
        // SAFETY: a tuple just made, alive, tracked; the GIL is held
        unsafe { ffi::PyObject_GC_UnTrack(pair.as_ptr().cast()) };
    }
    Ok(pair)
}
