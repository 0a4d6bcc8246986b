//! The comparison metrics, pinned (DESIGN.md, "Metrics"): computed in f64, whatever ran the
//! kernel, so every part of rung and every report agrees. Here in Rust for everything rung draws
//! itself; for GPU MODE and KernelBench problems, whose tensors can be gigabytes on the GPU, by
//! the same formulas in the worker (`assets/python/rung_problem.py`, `compare`), held to these
//! figures by `tests/protocol.rs`.
//!
//! With o = output and r = reference, element-wise:
//! - max abs err = max |o − r|; mean abs err; MSE; RMSE
//! - rel err = |o − r| / max(|r|, 1e-6 · max|r|, tiny), reported as its maximum
//! - PSNR = 20·log10(max|r|) − 10·log10(MSE), +∞ when MSE = 0
//! - cosine similarity = Σ o·r / (‖o‖ ‖r‖), 1 when both are zero
//! - a mismatch is an element with |o − r| > atol + rtol·|r| (allclose's rule), or a NaN/Inf in o
//!   where r is finite; a NaN in both counts as equal.
//!
//! Non-finite outputs are counted separately and left out of the sums, so one NaN does not turn
//! every other number into NaN.

use crate::dtype::{DType, Tolerance};
pub use crate::model::metrics::{Comparison, Mismatch};

/// How many mismatching elements are listed with their indices.
pub const MAX_LISTED: usize = 8;
/// The error map's resolution (cells per side, at most).
pub const MAP_CELLS: usize = 32;

/// Why a comparison fails, in words, or `None` when it passes the tolerance.
pub fn judge(c: &Comparison, tol: &Tolerance) -> Option<String> {
    if c.nan_count + c.inf_count > 0 && c.mismatches > 0 {
        return Some(format!(
            "{} NaN and {} Inf in the output where the reference is finite",
            c.nan_count, c.inf_count
        ));
    }
    if c.mismatches > 0 {
        let m = &c.first_mismatches[0];
        return Some(format!(
            "{} of {} elements differ beyond atol {:.0e} + rtol {:.0e}·|ref|; first at {:?}: {} vs {} (max abs err {:.3e})",
            c.mismatches, c.elements, tol.atol, tol.rtol, m.index, m.output, m.reference, c.max_abs_err
        ));
    }
    if let (Some(min), Some(psnr)) = (tol.min_psnr, c.psnr)
        && psnr < min
    {
        return Some(format!("PSNR {psnr:.1} dB is below the minimum {min:.1} dB"));
    }
    if let Some(min) = tol.min_cosine
        && c.cosine < min
    {
        return Some(format!("cosine similarity {:.6} is below the minimum {min}", c.cosine));
    }
    None
}

/// The multi-dimensional index of flat element `i` in a row-major `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (d, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            idx[d] = i % n;
            i /= n;
        }
    }
    idx
}

/// Elements one part of a comparison covers: a comparison of more is split into parts of this
/// many, run on every core and merged in order. The split depends on the length alone, so the
/// figures are the same on every machine; up to one part, they are the plain sequential sums.
pub const PART: usize = 1 << 22;
/// Elements converted to f64 at a time within a part (two buffers of 64 KiB).
const PIECE: usize = 1 << 13;

/// One part's sums, extremes, counts, first mismatches and error map.
struct Part {
    sums: [f64; 5],
    finite: usize,
    max_abs: f64,
    max_rel: f64,
    mismatches: usize,
    first: Vec<Mismatch>,
    nan: usize,
    inf: usize,
    map: Vec<f64>,
}

/// The layout every part shares: the error map's grid and the relative error's floor.
struct Grid<'a> {
    shape: &'a [usize],
    rows: usize,
    cols: usize,
    map_shape: [usize; 2],
    floor: f64,
    tol: &'a Tolerance,
}

impl Part {
    fn new(g: &Grid) -> Part {
        Part {
            sums: [0.0; 5],
            finite: 0,
            max_abs: 0.0,
            max_rel: 0.0,
            mismatches: 0,
            first: Vec::new(),
            nan: 0,
            inf: 0,
            map: vec![0f64; g.map_shape[0] * g.map_shape[1]],
        }
    }
}

/// Where element `i` falls in the error map, kept up to date one element at a time: the row,
/// the column and their cells move by counting, not by dividing for every element.
struct Cursor {
    rows: usize,
    cols: usize,
    map: [usize; 2],
    row: usize,
    col: usize,
    cell_row: usize,
    cell_col: usize,
    /// The first column of the next column cell.
    next_col: usize,
}

impl Cursor {
    fn at(i: usize, g: &Grid) -> Cursor {
        let (rows, cols) = (g.rows.max(1), g.cols.max(1));
        let (row, col) = ((i / cols) % rows, i % cols);
        let map = g.map_shape;
        let cell_col = col * map[1] / cols;
        Cursor {
            rows,
            cols,
            map,
            row,
            col,
            cell_row: row * map[0] / rows,
            cell_col,
            next_col: Self::first_col(cell_col + 1, cols, map[1]),
        }
    }

    /// The first column whose cell is `cell`: ceil(cell · cols / cells). A column's cell is
    /// floor(col · cells / cols), which grows by at most one a column (cells ≤ cols).
    fn first_col(cell: usize, cols: usize, cells: usize) -> usize {
        (cell * cols).div_ceil(cells)
    }

    fn cell(&self) -> usize {
        self.cell_row * self.map[1] + self.cell_col
    }

    fn step(&mut self) {
        self.col += 1;
        if self.col == self.cols {
            self.col = 0;
            self.cell_col = 0;
            self.next_col = Self::first_col(1, self.cols, self.map[1]);
            self.row += 1;
            if self.row == self.rows {
                self.row = 0;
            }
            self.cell_row = self.row * self.map[0] / self.rows;
        } else if self.col == self.next_col {
            self.cell_col += 1;
            self.next_col = Self::first_col(self.cell_col + 1, self.cols, self.map[1]);
        }
    }
}

/// Adds elements `offset..offset + output.len()` to `p`, in order: a part fed in pieces sums
/// exactly as one fed whole.
fn accumulate(p: &mut Part, output: &[f64], reference: &[f64], offset: usize, g: &Grid) {
    let [sum_abs, sum_sq, dot, oo, rr] = &mut p.sums;
    let mut at = Cursor::at(offset, g);
    for (k, (&o, &r)) in output.iter().zip(reference).enumerate() {
        let mismatch;
        if !o.is_finite() {
            if o.is_nan() {
                p.nan += 1;
            } else {
                p.inf += 1;
            }
            // NaN vs NaN, or the same infinity, is agreement.
            mismatch = !(o.is_nan() && r.is_nan() || o == r);
        } else if !r.is_finite() {
            mismatch = true;
        } else {
            let err = (o - r).abs();
            p.finite += 1;
            *sum_abs += err;
            *sum_sq += err * err;
            *dot += o * r;
            *oo += o * o;
            *rr += r * r;
            p.max_abs = p.max_abs.max(err);
            p.max_rel = p.max_rel.max(err / r.abs().max(g.floor));
            mismatch = err > g.tol.atol + g.tol.rtol * r.abs();
            let cell = at.cell();
            p.map[cell] = p.map[cell].max(err);
        }
        if mismatch {
            p.mismatches += 1;
            if p.first.len() < MAX_LISTED {
                p.first.push(Mismatch { index: unravel(offset + k, g.shape), output: o, reference: r });
            }
        }
        at.step();
    }
}

/// Compares an output with its reference (both already converted to f64), of `shape`.
pub fn compare(output: &[f64], reference: &[f64], shape: &[usize], tol: &Tolerance) -> Comparison {
    assert_eq!(output.len(), reference.len(), "compare: lengths differ");
    let n = output.len();
    let max_ref = in_parts(n, |a, b, _| finite_max(&reference[a..b])).into_iter().fold(0f64, f64::max);
    let g = Grid::new(shape, max_ref, tol);
    let parts = in_parts(n, |a, b, _| {
        let mut p = Part::new(&g);
        accumulate(&mut p, &output[a..b], &reference[a..b], a, &g);
        p
    });
    merge(parts, n, max_ref, g.map_shape)
}

/// [`compare`] on two buffers of `dtype` as they are in memory (a benchmark-size output read
/// from its file), converted a part at a time into each thread's own buffers: the same figures
/// without two f64 copies of the whole tensor.
pub fn compare_bytes(dtype: DType, output: &[u8], reference: &[u8], shape: &[usize], tol: &Tolerance) -> Comparison {
    assert_eq!(output.len(), reference.len(), "compare: lengths differ");
    let s = dtype.size_bytes();
    let n = output.len() / s;
    // Each part converted a piece at a time into buffers that stay in the core's cache: whole
    // parts in f64 went through memory three times over, and the comparison was bound by it.
    let pieces = |a: usize, b: usize| (a..b).step_by(PIECE).map(move |x| (x, (x + PIECE).min(b)));
    let max_ref = in_parts(n, |a, b, buf| {
        pieces(a, b).fold(0f64, |m, (x, y)| {
            crate::inputs::to_f64_into(dtype, &reference[x * s..y * s], &mut buf.1);
            m.max(finite_max(&buf.1))
        })
    })
    .into_iter()
    .fold(0f64, f64::max);
    let g = Grid::new(shape, max_ref, tol);
    let parts = in_parts(n, |a, b, buf| {
        let mut p = Part::new(&g);
        for (x, y) in pieces(a, b) {
            crate::inputs::to_f64_into(dtype, &output[x * s..y * s], &mut buf.0);
            crate::inputs::to_f64_into(dtype, &reference[x * s..y * s], &mut buf.1);
            accumulate(&mut p, &buf.0, &buf.1, x, &g);
        }
        p
    });
    merge(parts, n, max_ref, g.map_shape)
}

fn finite_max(values: &[f64]) -> f64 {
    values.iter().filter(|r| r.is_finite()).fold(0f64, |m, r| m.max(r.abs()))
}

/// `f(start, end, scratch)` for each part of `0..n` ([`PART`] elements each), on every core when
/// there is more than one part, each thread with scratch buffers of its own; the results in
/// order.
fn in_parts<T: Send>(n: usize, f: impl Fn(usize, usize, &mut (Vec<f64>, Vec<f64>)) -> T + Sync) -> Vec<T> {
    let spans: Vec<(usize, usize)> =
        (0..n.div_ceil(PART).max(1)).map(|k| (k * PART, ((k + 1) * PART).min(n))).collect();
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).min(32).min(spans.len());
    if threads < 2 {
        let mut scratch = (Vec::new(), Vec::new());
        return spans.iter().map(|&(a, b)| f(a, b, &mut scratch)).collect();
    }
    let mut slots: Vec<Option<T>> = (0..spans.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (spans, f) = (&spans, &f);
                scope.spawn(move || {
                    let mut scratch = (Vec::new(), Vec::new());
                    // Each thread takes every `threads`-th part.
                    (t..spans.len())
                        .step_by(threads)
                        .map(|k| (k, f(spans[k].0, spans[k].1, &mut scratch)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (k, x) in h.join().expect("a comparison part does not panic") {
                slots[k] = Some(x);
            }
        }
    });
    slots.into_iter().map(|x| x.expect("every part computed")).collect()
}

impl<'a> Grid<'a> {
    fn new(shape: &'a [usize], max_ref: f64, tol: &'a Tolerance) -> Grid<'a> {
        // The error map over the last two dimensions (rows × cols); 1-D tensors are one row.
        let (rows, cols) = match shape {
            [] => (1, 1),
            [c] => (1, *c),
            [.., r, c] => (*r, *c),
        };
        let map_shape = [rows.clamp(1, MAP_CELLS), cols.clamp(1, MAP_CELLS)];
        Grid { shape, rows, cols, map_shape, floor: (1e-6 * max_ref).max(f64::MIN_POSITIVE), tol }
    }
}

/// The parts' figures in order: sums added part by part, extremes and counts combined, the first
/// mismatches of the earliest parts, the error maps cell by cell.
fn merge(parts: Vec<Part>, n: usize, max_ref: f64, map_shape: [usize; 2]) -> Comparison {
    let mut sums = [0f64; 5];
    let mut c = Comparison {
        elements: n,
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        mean_abs_err: 0.0,
        mse: 0.0,
        rmse: 0.0,
        psnr: None,
        cosine: 1.0,
        mismatches: 0,
        first_mismatches: Vec::new(),
        nan_count: 0,
        inf_count: 0,
        error_map: vec![0f64; map_shape[0] * map_shape[1]],
        map_shape,
    };
    let mut finite = 0usize;
    for p in parts {
        for (s, x) in sums.iter_mut().zip(p.sums) {
            *s += x;
        }
        finite += p.finite;
        c.max_abs_err = c.max_abs_err.max(p.max_abs);
        c.max_rel_err = c.max_rel_err.max(p.max_rel);
        c.mismatches += p.mismatches;
        c.nan_count += p.nan;
        c.inf_count += p.inf;
        let room = MAX_LISTED - c.first_mismatches.len();
        c.first_mismatches.extend(p.first.into_iter().take(room));
        for (m, x) in c.error_map.iter_mut().zip(p.map) {
            *m = m.max(x);
        }
    }
    let [sum_abs, sum_sq, dot, oo, rr] = sums;
    if finite > 0 {
        c.mean_abs_err = sum_abs / finite as f64;
        c.mse = sum_sq / finite as f64;
        c.rmse = c.mse.sqrt();
    }
    c.psnr = if c.mse == 0.0 { None } else { Some(20.0 * max_ref.log10() - 10.0 * c.mse.log10()) };
    c.cosine = if oo == 0.0 && rr == 0.0 {
        1.0
    } else if oo == 0.0 || rr == 0.0 {
        0.0
    } else {
        dot / (oo.sqrt() * rr.sqrt())
    };
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past one part, the comparison is split, run on every core and merged: the counts, the
    /// first mismatches, the extremes and the error map are those of one sequential pass, and the
    /// sums agree with it to rounding.
    #[test]
    fn a_comparison_in_parts_is_the_sequential_one() {
        let n = 7 * 1_200_000; // past two parts, and 7 rows
        let reference: Vec<f64> =
            (0..n).map(|i| ((i as u64).wrapping_mul(2_654_435_761) % 1000) as f64 * 0.01 - 5.0).collect();
        let mut output = reference.clone();
        for i in [3, PART - 1, PART, PART + 7, 2 * PART + 1, n - 1] {
            output[i] += 0.5;
        }
        for i in (0..n).step_by(97) {
            output[i] += 1e-9;
        }
        output[PART + 100] = f64::NAN;
        let rows = [7, n / 7];
        let shape = &rows[..];
        let tol = tol(1e-5, 1e-4);
        let flat = [n];
        for shape in [&flat[..], shape] {
            assert_eq!(shape.iter().product::<usize>(), n);
            let c = compare(&output, &reference, shape, &tol);
            let max_ref = reference.iter().fold(0f64, |m, r| m.max(r.abs()));
            let g = Grid::new(shape, max_ref, &tol);
            let mut whole = Part::new(&g);
            accumulate(&mut whole, &output, &reference, 0, &g);
            let seq = merge(vec![whole], n, max_ref, g.map_shape);
            assert_eq!(c.mismatches, 7, "six moved elements and one NaN");
            assert_eq!((c.mismatches, c.nan_count, c.inf_count), (seq.mismatches, seq.nan_count, seq.inf_count));
            assert_eq!(format!("{:?}", c.first_mismatches), format!("{:?}", seq.first_mismatches), "NaN included");
            assert_eq!((c.max_abs_err, c.max_rel_err), (seq.max_abs_err, seq.max_rel_err));
            assert_eq!(c.error_map, seq.error_map);
            for (a, b) in [(c.mean_abs_err, seq.mean_abs_err), (c.mse, seq.mse), (c.cosine, seq.cosine)] {
                assert!((a - b).abs() <= 1e-12 * b.abs().max(1e-300), "{a} vs {b}");
            }
            let again = compare(&output, &reference, shape, &tol);
            assert_eq!(format!("{again:?}"), format!("{c:?}"), "the same figures every time");
            // From the bytes as they are in memory: the same figures exactly.
            let bytes = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            let from_bytes = compare_bytes(DType::F64, &bytes(&output), &bytes(&reference), shape, &tol);
            assert_eq!(format!("{from_bytes:?}"), format!("{c:?}"), "compare_bytes is compare");
        }
    }

    /// The error map's cell of every element, counted one element at a time from any start, is
    /// the one its index gives by division (`(i / cols) % rows`, `i % cols`, scaled to the map).
    #[test]
    fn the_cursor_finds_each_element_s_cell_as_division_does() {
        let tol = tol(0.0, 0.0);
        for shape in
            [&[1][..], &[5], &[31], &[32], &[33], &[100], &[3, 5], &[40, 7], &[7, 40], &[2, 64, 70], &[1, 1], &[65, 1]]
        {
            let g = Grid::new(shape, 1.0, &tol);
            let n: usize = shape.iter().product();
            let (rows, cols) = (g.rows.max(1), g.cols.max(1));
            let by_division = |i: usize| {
                let (row, col) = ((i / cols) % rows, i % cols);
                (row * g.map_shape[0] / rows) * g.map_shape[1] + col * g.map_shape[1] / cols
            };
            for start in [0, 1, n / 3, n.saturating_sub(1)] {
                let mut at = Cursor::at(start, &g);
                for i in start..n {
                    assert_eq!(at.cell(), by_division(i), "{shape:?}: element {i} from {start}");
                    at.step();
                }
            }
        }
    }

    fn tol(atol: f64, rtol: f64) -> Tolerance {
        Tolerance { atol, rtol, min_psnr: None, min_cosine: None }
    }

    #[test]
    fn known_values() {
        let r = [1.0, 2.0, -4.0, 0.0];
        let o = [1.0, 2.5, -4.0, 0.1];
        let c = compare(&o, &r, &[2, 2], &tol(1e-5, 1e-4));
        assert_eq!(c.max_abs_err, 0.5);
        assert!((c.mean_abs_err - 0.15).abs() < 1e-12);
        assert!((c.mse - (0.25 + 0.01) / 4.0).abs() < 1e-12);
        // rel err of the last element: 0.1 / max(0, 1e-6 * 4, tiny) = 25000.
        assert!((c.max_rel_err - 0.1 / 4e-6).abs() < 1e-6);
        assert!((c.psnr.unwrap() - (20.0 * 4f64.log10() - 10.0 * c.mse.log10())).abs() < 1e-12);
        let dot = 1.0 + 5.0 + 16.0;
        let cos = dot / ((1.0f64 + 6.25 + 16.0 + 0.01).sqrt() * 21f64.sqrt());
        assert!((c.cosine - cos).abs() < 1e-12);
        assert_eq!(c.mismatches, 2);
        assert_eq!(c.first_mismatches[0].index, vec![0, 1]);
        assert_eq!(c.first_mismatches[1].index, vec![1, 1]);
        assert!(judge(&c, &tol(1e-5, 1e-4)).unwrap().starts_with("2 of 4 elements differ"));
    }

    #[test]
    fn exact_match_has_infinite_psnr_and_unit_cosine() {
        let v = [0.5, -1.5, 3.0];
        let c = compare(&v, &v, &[3], &tol(0.0, 0.0));
        assert_eq!((c.mse, c.psnr, c.cosine, c.mismatches), (0.0, None, 1.0, 0));
        let z = [0.0; 3];
        assert_eq!(compare(&z, &z, &[3], &tol(0.0, 0.0)).cosine, 1.0);
        assert_eq!(judge(&c, &tol(0.0, 0.0)), None);
    }

    #[test]
    fn nans_are_counted_not_summed() {
        let r = [1.0, f64::NAN, 2.0];
        let o = [f64::NAN, f64::NAN, 2.0];
        let c = compare(&o, &r, &[3], &tol(1e-5, 1e-4));
        assert_eq!(c.nan_count, 2);
        assert_eq!(c.mismatches, 1, "NaN where the reference is NaN agrees");
        assert_eq!(c.max_abs_err, 0.0);
        assert!(judge(&c, &tol(1e-5, 1e-4)).unwrap().contains("NaN"));
    }

    #[test]
    fn fused_multiply_add_rounding_passes_the_f32_defaults() {
        // a + b*3 in f32 with one rounding (FMA) against two roundings, near zero.
        let (mut o, mut r) = (Vec::new(), Vec::new());
        for i in 0..10_000 {
            let a = (i as f32 * 0.37).sin();
            let b = -(a / 3.0) + (i as f32 * 1e-9);
            r.push((a + b * 3.0) as f64);
            o.push(b.mul_add(3.0, a) as f64);
        }
        // torch.allclose's defaults fail this honest kernel...
        let allclose = tol(1e-8, 1e-5);
        assert!(compare(&o, &r, &[10_000], &allclose).mismatches > 0);
        // ...rung's f32 defaults do not.
        let f32 = crate::dtype::DType::F32.default_tolerance();
        let c = compare(&o, &r, &[10_000], &f32);
        assert_eq!(judge(&c, &f32), None, "{c:?}");
    }

    #[test]
    fn reduced_precision_judged_by_psnr_and_cosine() {
        let r: Vec<f64> = (0..1000).map(|i| (i as f64 * 0.1).sin()).collect();
        let noisy: Vec<f64> = r.iter().enumerate().map(|(i, v)| v + if i % 2 == 0 { 0.05 } else { -0.05 }).collect();
        let t = Tolerance { atol: 1.0, rtol: 1.0, min_psnr: Some(30.0), min_cosine: Some(0.999) };
        let c = compare(&noisy, &r, &[1000], &t);
        assert!((c.psnr.unwrap() - 26.0).abs() < 0.1, "{:?}", c.psnr);
        assert!(judge(&c, &t).unwrap().starts_with("PSNR 26.0 dB is below the minimum 30.0 dB"));
    }

    #[test]
    fn error_map_locates_the_error() {
        let rows = 64;
        let cols = 64;
        let r = vec![0.0; rows * cols];
        let mut o = r.clone();
        o[63 * cols + 63] = 1.0;
        let c = compare(&o, &r, &[rows, cols], &tol(1e-5, 0.0));
        assert_eq!(c.map_shape, [32, 32]);
        assert_eq!(c.error_map[31 * 32 + 31], 1.0);
        assert_eq!(c.error_map.iter().filter(|e| **e > 0.0).count(), 1);
        assert_eq!(c.first_mismatches[0].index, vec![63, 63]);
    }
}
