//! peerwatch's compiled remote_write decoder: snappy block + protobuf `WriteRequest` ->
//! `Series`, for the shape Prometheus sends; and (`kernel`) the frame builder's per-sample
//! loop over the decoder's columns.
//!
//! It is a fast path, not a second implementation of the format: `Decoder.decode` returns
//! `None` for any body it does not fully understand (metadata, exemplars, histograms,
//! unknown fields, unusual encodings, empty label values, anything malformed), and the
//! pure-Python `WriteRequestDecoder` -- the reference -- then decodes that body whole,
//! with its own error messages. What it does accept it decodes exactly as the reference
//! does (tests/unit/test_remote_write_native.py holds the two side by side).
//!
//! Label dicts are cached by the bytes of a series' labels and handed out again for the
//! same bytes, so the frame builder's per-dict memo (`_label_memo`) hits.

mod kernel;

use indexmap::IndexMap;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyType};
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};

/// A body this decoder leaves to the reference decoder.
struct Unusual;

type Parse<T> = Result<T, Unusual>;

const FRAMED_SNAPPY_MAGIC: &[u8] = b"\xff\x06\x00\x00sNaPpY";
const GZIP_MAGIC: &[u8] = b"\x1f\x8b";
/// The first 11 bytes of `Label{name="__name__", ...}` (the reference's prefilter).
const NAME_LABEL: &[u8] = b"\x0a\x08__name__\x12";
const PAIR_CACHE_SIZE: usize = 100_000;

fn varint(buf: &[u8], pos: &mut usize) -> Parse<u64> {
    let mut value: u64 = 0;
    let mut shift = 0;
    loop {
        let byte = *buf.get(*pos).ok_or(Unusual)?;
        *pos += 1;
        if shift == 63 && byte > 1 {
            return Err(Unusual); // more than 64 bits
        }
        value |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
    }
}

/// The payload of a length-delimited field whose length varint starts at `pos`.
fn delimited<'a>(buf: &'a [u8], pos: &mut usize) -> Parse<&'a [u8]> {
    let len = usize::try_from(varint(buf, pos)?).map_err(|_| Unusual)?;
    let end = pos
        .checked_add(len)
        .filter(|&e| e <= buf.len())
        .ok_or(Unusual)?;
    let payload = &buf[*pos..end];
    *pos = end;
    Ok(payload)
}

/// `Label{name, value}` written as Prometheus writes it: name then value, both non-empty
/// UTF-8. Anything else (an empty value the reference drops, repeated fields) is unusual.
fn label(buf: &[u8]) -> Parse<(&str, &str)> {
    let mut pos = 0;
    if buf.first() != Some(&0x0A) {
        return Err(Unusual);
    }
    pos += 1;
    let name = delimited(buf, &mut pos)?;
    if buf.get(pos) != Some(&0x12) {
        return Err(Unusual);
    }
    pos += 1;
    let value = delimited(buf, &mut pos)?;
    if pos != buf.len() || name.is_empty() || value.is_empty() {
        return Err(Unusual);
    }
    let name = std::str::from_utf8(name).map_err(|_| Unusual)?;
    let value = std::str::from_utf8(value).map_err(|_| Unusual)?;
    Ok((name, value))
}

/// `Sample{value, timestamp}`; proto3 leaves out zeros, a repeated field's last one wins.
fn sample(buf: &[u8]) -> Parse<(i64, f64)> {
    let (mut ts, mut value) = (0i64, 0.0f64);
    let mut pos = 0;
    while pos < buf.len() {
        match buf[pos] {
            0x09 => {
                let bytes = buf.get(pos + 1..pos + 9).ok_or(Unusual)?;
                value = f64::from_le_bytes(bytes.try_into().map_err(|_| Unusual)?);
                pos += 9;
            }
            0x10 => {
                pos += 1;
                ts = varint(buf, &mut pos)? as i64; // int64: two's complement on the wire
            }
            _ => return Err(Unusual),
        }
    }
    Ok((ts, value))
}

/// One `TimeSeries` split into its labels and samples.
struct Parts<'a> {
    labels: Vec<&'a [u8]>,
    /// The bytes of all its Label fields when they are one run (the cache key), else None.
    label_run: Option<&'a [u8]>,
    samples: Vec<(i64, f64)>,
}

fn timeseries(raw: &[u8]) -> Parse<Parts<'_>> {
    let mut parts = Parts {
        labels: Vec::with_capacity(16),
        label_run: None,
        samples: Vec::new(),
    };
    let (mut run_start, mut run_end, mut one_run) = (None, 0, true);
    let mut pos = 0;
    while pos < raw.len() {
        let start = pos;
        let tag = raw[pos];
        pos += 1;
        let payload = delimited(raw, &mut pos)?;
        match tag {
            0x0A => {
                match run_start {
                    None => run_start = Some(start),
                    Some(_) if run_end != start => one_run = false,
                    Some(_) => {}
                }
                run_end = pos;
                parts.labels.push(payload);
            }
            0x12 => parts.samples.push(sample(payload)?),
            _ => return Err(Unusual), // exemplars, histograms, unknown fields
        }
    }
    if let (Some(s), true) = (run_start, one_run) {
        parts.label_run = Some(&raw[s..run_end]);
    }
    Ok(parts)
}

/// True if the reference's prefilter skips `raw` unread: exactly its byte test.
fn prefiltered_out(raw: &[u8], wanted: &FxHashSet<Vec<u8>>) -> bool {
    let Some(at) = find_name_label(raw) else {
        return false;
    };
    if find_name_label(&raw[at + 11..]).is_some() {
        return false;
    }
    let size = raw.get(at + 11).map_or(0x80, |&b| usize::from(b));
    if size >= 0x80 {
        return false;
    }
    let lo = at + 12;
    let name = &raw[lo..(lo + size).min(raw.len())];
    !wanted.contains(name)
}

/// The first `NAME_LABEL` in `raw`: one substring search (every Label starts with the
/// pattern's first byte, so testing each of those was most of the prefilter's cost).
fn find_name_label(raw: &[u8]) -> Option<usize> {
    static FINDER: std::sync::OnceLock<memchr::memmem::Finder<'static>> =
        std::sync::OnceLock::new();
    FINDER
        .get_or_init(|| memchr::memmem::Finder::new(NAME_LABEL))
        .find(raw)
}

/// What a body decodes to: series (or label dicts), the columns if asked and possible,
/// and the series the prefilter skipped.
type Decoded<'py> = (
    Bound<'py, PyList>,
    Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>,
    usize,
);

#[pyclass(module = "peerwatch_native")]
struct Decoder {
    series_type: Py<PyType>,
    /// `Series.labels` and `Series.samples`: the slots' member descriptors
    slots: (PyObject, PyObject),
    wanted: Option<FxHashSet<Vec<u8>>>,
    label_cache_size: usize,
    max_body_bytes: usize,
    max_series_per_request: usize,
    /// label bytes -> labels (None: valid, but a name the prefilter does not want)
    labels: IndexMap<Vec<u8>, Option<Py<PyDict>>, FxBuildHasher>,
    /// one encoded Label -> (name, value): shared strings for dicts built anew
    pairs: FxHashMap<Vec<u8>, (Py<PyString>, Py<PyString>)>,
    buffer: Vec<u8>,
}

#[pymethods]
impl Decoder {
    #[new]
    #[pyo3(signature = (series_type, *, metric_names, label_cache_size, max_body_bytes, max_series_per_request))]
    fn new(
        py: Python<'_>,
        series_type: Py<PyType>,
        metric_names: Option<Vec<String>>,
        label_cache_size: usize,
        max_body_bytes: usize,
        max_series_per_request: usize,
    ) -> PyResult<Self> {
        let slots = {
            let t = series_type.bind(py);
            let member = py.import("types")?.getattr("MemberDescriptorType")?;
            let labels = t.getattr("labels")?;
            let samples = t.getattr("samples")?;
            if !labels.is_instance(&member)? || !samples.is_instance(&member)? {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "series_type must be a slots class with `labels` and `samples`",
                ));
            }
            (labels.unbind(), samples.unbind())
        };
        Ok(Decoder {
            series_type,
            slots,
            wanted: metric_names.map(|names| names.into_iter().map(String::into_bytes).collect()),
            label_cache_size,
            max_body_bytes,
            max_series_per_request,
            labels: IndexMap::default(),
            pairs: FxHashMap::default(),
            buffer: Vec::new(),
        })
    }

    /// `(series, skipped)` for `body`, or None: the reference decoder must take it.
    fn decode<'py>(
        &mut self,
        py: Python<'py>,
        body: &[u8],
    ) -> PyResult<Option<(Bound<'py, PyList>, usize)>> {
        match self.decode_body(py, body, false) {
            Ok(Ok((series, _, skipped))) => Ok(Some((series, skipped))),
            Ok(Err(Unusual)) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// `decode` in columns when every series has one sample (Prometheus' shape):
    /// `(labels, (timestamps, values), skipped)` -- one label dict per series, the
    /// samples as native-endian int64 and float64 bytes -- else `(series, None, skipped)`
    /// as `decode` gives them; None: the reference decoder must take it.
    fn decode_columns<'py>(
        &mut self,
        py: Python<'py>,
        body: &[u8],
    ) -> PyResult<Option<Decoded<'py>>> {
        match self.decode_body(py, body, true) {
            Ok(Ok(done)) => Ok(Some(done)),
            Ok(Err(Unusual)) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Label sets in the cache.
    #[getter]
    fn cached_label_sets(&self) -> usize {
        self.labels.len()
    }
}

impl Decoder {
    fn decode_body<'py>(
        &mut self,
        py: Python<'py>,
        body: &[u8],
        columns: bool,
    ) -> PyResult<Parse<Decoded<'py>>> {
        if body.is_empty() || body.starts_with(FRAMED_SNAPPY_MAGIC) || body.starts_with(GZIP_MAGIC)
        {
            return Ok(Err(Unusual));
        }
        let size = match snap::raw::decompress_len(body) {
            Ok(size) if size <= self.max_body_bytes => size,
            _ => return Ok(Err(Unusual)),
        };
        let mut raw = std::mem::take(&mut self.buffer);
        raw.resize(size, 0);
        // No collection while a body's objects are made (they are all alive until the
        // body is done; a pass every 700 of them only promotes them): the collector runs
        // once after, on its own schedule.
        // SAFETY: plain C calls on the interpreter's collector state; the GIL is held.
        let was_enabled = unsafe { ffi::PyGC_Disable() } == 1;
        let out = match snap::raw::Decoder::new().decompress(body, &mut raw) {
            Ok(n) if n == size => self.request(py, &raw, columns),
            _ => Ok(Err(Unusual)),
        };
        if was_enabled {
            unsafe { ffi::PyGC_Enable() };
        }
        self.buffer = raw;
        out
    }

    fn request<'py>(
        &mut self,
        py: Python<'py>,
        raw: &[u8],
        columns: bool,
    ) -> PyResult<Parse<Decoded<'py>>> {
        let mut spans = Vec::new();
        let mut pos = 0;
        while pos < raw.len() {
            if raw[pos] != 0x0A {
                return Ok(Err(Unusual)); // metadata, unknown fields
            }
            pos += 1;
            match delimited(raw, &mut pos) {
                Ok(series) => spans.push(series),
                Err(unusual) => return Ok(Err(unusual)),
            }
        }
        if spans.len() > self.max_series_per_request {
            return Ok(Err(Unusual));
        }
        // every series' labels and (end of) its samples in one flat run
        let mut labels = Vec::with_capacity(spans.len());
        let mut ends = Vec::with_capacity(spans.len());
        let mut samples: Vec<(i64, f64)> = Vec::with_capacity(spans.len());
        let mut skipped = 0;
        for raw in spans {
            if let Some(wanted) = &self.wanted {
                if prefiltered_out(raw, wanted) {
                    skipped += 1;
                    continue;
                }
            }
            let Ok(parts) = timeseries(raw) else {
                return Ok(Err(Unusual));
            };
            let dict = match self.labels_of(py, &parts)? {
                Ok(Some(labels)) => labels,
                Ok(None) => {
                    skipped += 1;
                    continue;
                }
                Err(unusual) => return Ok(Err(unusual)),
            };
            if parts.samples.is_empty() {
                continue; // no float sample: nothing peerwatch reads
            }
            samples.extend_from_slice(&parts.samples);
            labels.push(dict);
            ends.push(samples.len());
        }
        if columns && samples.len() == labels.len() {
            let ts: Vec<i64> = samples.iter().map(|s| s.0).collect();
            let values: Vec<f64> = samples.iter().map(|s| s.1).collect();
            // SAFETY: plain-old-data slices viewed as their bytes, alive for the copy
            let (ts, values) = unsafe {
                (
                    std::slice::from_raw_parts(ts.as_ptr().cast::<u8>(), ts.len() * 8),
                    std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), values.len() * 8),
                )
            };
            let columns = (PyBytes::new(py, ts), PyBytes::new(py, values));
            return Ok(Ok((PyList::new(py, labels)?, Some(columns), skipped)));
        }
        let mut out = Vec::with_capacity(labels.len());
        let mut start = 0;
        for (dict, end) in labels.into_iter().zip(ends) {
            out.push(self.series(py, dict, &samples[start..end])?);
            start = end;
        }
        Ok(Ok((PyList::new(py, out)?, None, skipped)))
    }

    /// The series' labels (cached by their bytes), or None if the prefilter does not want
    /// its name.
    fn labels_of<'py>(
        &mut self,
        py: Python<'py>,
        parts: &Parts<'_>,
    ) -> PyResult<Parse<Option<Bound<'py, PyDict>>>> {
        if let Some(run) = parts.label_run {
            if let Some(cached) = self.labels.get(run) {
                return Ok(Ok(cached.as_ref().map(|d| d.bind(py).clone())));
            }
        }
        let dict = PyDict::new(py);
        let mut name: Option<&str> = None;
        for encoded in &parts.labels {
            let Ok((k, v)) = label(encoded) else {
                return Ok(Err(Unusual));
            };
            if k == "__name__" {
                name = Some(v);
            }
            let (key, value) = self.pair(py, encoded, k, v);
            dict.set_item(key, value)?;
        }
        let Some(name) = name else {
            return Ok(Err(Unusual)); // the reference's "series without __name__"
        };
        if dict.len() != parts.labels.len() {
            return Ok(Err(Unusual)); // a label name twice
        }
        let kept = match &self.wanted {
            Some(wanted) if !wanted.contains(name.as_bytes()) => None,
            _ => Some(dict),
        };
        if let (Some(run), true) = (parts.label_run, self.label_cache_size > 0) {
            if self.labels.len() >= self.label_cache_size {
                // the oldest eighth at once, as the reference does
                let n = (self.label_cache_size / 8).max(1).min(self.labels.len());
                self.labels.drain(..n);
            }
            self.labels
                .insert(run.to_vec(), kept.as_ref().map(|d| d.clone().unbind()));
        }
        Ok(Ok(kept))
    }

    /// `Series(labels, [(ts, value), ...])` as `object.__new__` and two slot stores make it:
    /// calling the dataclass runs its Python ``__init__``, the largest cost per sample.
    fn series<'py>(
        &self,
        py: Python<'py>,
        labels: Bound<'py, PyDict>,
        samples: &[(i64, f64)],
    ) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: each new reference is checked for NULL before use and owned by a Bound
        // (released on every path); PyList_SetItem / PyTuple_SetItem steal theirs.
        unsafe {
            let list = Bound::from_owned_ptr_or_err(py, ffi::PyList_New(samples.len() as isize))?;
            for (i, &(ts, value)) in samples.iter().enumerate() {
                let t = Bound::from_owned_ptr_or_err(py, ffi::PyLong_FromLongLong(ts))?;
                let v = Bound::from_owned_ptr_or_err(py, ffi::PyFloat_FromDouble(value))?;
                let pair = Bound::from_owned_ptr_or_err(py, ffi::PyTuple_New(2))?;
                ffi::PyTuple_SetItem(pair.as_ptr(), 0, t.into_ptr());
                ffi::PyTuple_SetItem(pair.as_ptr(), 1, v.into_ptr());
                // an int and a float cannot be in a cycle: untracked now, as CPython's
                // collector would untrack it at its first pass anyway
                ffi::PyObject_GC_UnTrack(pair.as_ptr().cast());
                ffi::PyList_SetItem(list.as_ptr(), i as isize, pair.into_ptr());
            }
            let tp = self.series_type.as_ptr().cast::<ffi::PyTypeObject>();
            let alloc = (*tp).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
            let series = Bound::from_owned_ptr_or_err(py, alloc(tp, 0))?;
            for (descr, value) in [
                (&self.slots.0, labels.as_any()),
                (&self.slots.1, list.as_any()),
            ] {
                let set = (*ffi::Py_TYPE(descr.as_ptr()))
                    .tp_descr_set
                    .expect("a member descriptor");
                if set(descr.as_ptr(), series.as_ptr(), value.as_ptr()) < 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            Ok(series)
        }
    }

    fn pair<'py>(
        &mut self,
        py: Python<'py>,
        encoded: &[u8],
        name: &str,
        value: &str,
    ) -> (Bound<'py, PyString>, Bound<'py, PyString>) {
        if let Some((k, v)) = self.pairs.get(encoded) {
            return (k.bind(py).clone(), v.bind(py).clone());
        }
        if self.pairs.len() >= PAIR_CACHE_SIZE {
            self.pairs.clear(); // cheap to refill: the next requests bring the same pairs
        }
        let (k, v) = (PyString::intern(py, name), PyString::new(py, value));
        self.pairs
            .insert(encoded.to_vec(), (k.clone().unbind(), v.clone().unbind()));
        (k, v)
    }
}

#[pymodule]
fn peerwatch_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Decoder>()?;
    m.add_class::<kernel::AddKernel>()
}
