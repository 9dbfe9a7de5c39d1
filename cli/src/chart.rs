//! Grouped bar charts as PNG images.
//!
//! Drawn with `plotters` on an RGB buffer, text set in DejaVu Sans through `ab_glyph`
//! (the font is bundled by the `dejavu` crate under the Bitstream Vera / DejaVu licence,
//! which permits redistribution; no system font or fontconfig is needed), and encoded with
//! `png`.
//!
//! The chart has one group of bars per label, one bar per series in each group, and every
//! series is scaled to its own maximum (so latency in ms and memory in MiB can share one
//! chart): the y axis is "% of the series maximum", and the real value is printed above
//! each bar.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::sync::OnceLock;

/// One series of values, one per label, drawn in its own colour on its own scale.
pub struct Series {
    pub name: String,
    pub unit: String,
    pub values: Vec<f64>,
}

/// Why a chart could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("the bundled font could not be loaded")]
    Font,
    #[error("drawing the chart failed: {0}")]
    Draw(String),
    #[error("encoding the PNG failed: {0}")]
    Encode(#[from] png::EncodingError),
}

/// Largest width or height rendered; larger requests are clamped (and 0 becomes 1).
pub const MAX_DIM: u32 = 4096;

/// The family name the bundled font is registered under.
const FONT: &str = "npurt-dejavu-sans";

const TEXT: RGBColor = RGBColor(34, 34, 34);
const AXIS: RGBColor = RGBColor(90, 90, 90);
const GRID: RGBColor = RGBColor(226, 226, 226);
const MUTED: RGBColor = RGBColor(110, 110, 110);

/// Series colours, cycled when there are more series than colours.
pub const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Renders a grouped bar chart as PNG bytes: title at the top, a legend ("name (unit)")
/// under it, one group per label on the x axis (the label under the group), the value
/// above each bar, and for each series its own scale (bars of series k are
/// `values[k][i] / max(values[k])`). Size `width` x `height` pixels (e.g. 900 x 500),
/// each clamped to 1..=[`MAX_DIM`].
///
/// The number of groups is the larger of `labels.len()` and the longest series; a missing
/// value draws no bar, a non-finite value draws no bar and prints "n/a", zero and negative
/// values draw no bar but print their value, and a series whose maximum is not positive
/// draws no bars. An image too small for a plot holds the title and legend only.
pub fn bar_chart_png(
    title: &str,
    labels: &[String],
    series: &[Series],
    width: u32,
    height: u32,
) -> Result<Vec<u8>, ChartError> {
    let (w, h) = (width.clamp(1, MAX_DIM), height.clamp(1, MAX_DIM));
    let rgb = bar_chart_rgb(title, labels, series, w, h)?;
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::High);
    let mut writer = enc.write_header()?;
    writer.write_image_data(&rgb)?;
    writer.finish()?;
    Ok(out)
}

/// [`bar_chart_png`]'s pixels: `w * h` RGB triples, row by row (`w`, `h` already clamped).
fn bar_chart_rgb(title: &str, labels: &[String], series: &[Series], w: u32, h: u32) -> Result<Vec<u8>, ChartError> {
    register_font()?;
    let mut rgb = vec![255u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw(&root, title, labels, series).map_err(|e| ChartError::Draw(e.to_string()))?;
        root.present().map_err(|e| ChartError::Draw(e.to_string()))?;
    }
    Ok(rgb)
}

fn register_font() -> Result<(), ChartError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok());
    if ok { Ok(()) } else { Err(ChartError::Font) }
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;
type DrawError = DrawingAreaErrorKind<<BitMapBackend<'static> as DrawingBackend>::ErrorType>;
type DrawResult = Result<(), DrawError>;

fn style(size: f64, color: &'static RGBColor) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).color(color)
}

/// Width and height of `s` in pixels; 0 where the font cannot measure it.
fn text_size(area: &Area, s: &str, st: &TextStyle) -> (i32, i32) {
    area.estimate_text_size(s, st).map(|(w, h)| (w as i32, h as i32)).unwrap_or((0, 0))
}

/// `s` (control characters as spaces, trimmed) if it is at most `max_w` pixels wide, else
/// its longest prefix that fits with "…" appended; `None` when not even that fits.
fn fit(area: &Area, s: &str, st: &TextStyle, max_w: i32) -> Option<String> {
    let s: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let s = s.trim();
    if s.is_empty() || max_w <= 0 {
        return None;
    }
    if text_size(area, s, st).0 <= max_w {
        return Some(s.to_string());
    }
    let chars: Vec<char> = s.chars().collect();
    let cut = |n: usize| chars[..n].iter().collect::<String>() + "…";
    // The longest prefix that fits, by bisection (the text may be long).
    let (mut lo, mut hi) = (0usize, chars.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if text_size(area, &cut(mid), st).0 <= max_w { lo = mid } else { hi = mid - 1 }
    }
    (lo > 0).then(|| cut(lo))
}

/// Text sizes, scaled with the image (900 x 500 is scale 1).
struct Sizes {
    title: f64,
    legend: f64,
    label: f64,
    value: f64,
    axis: f64,
}

impl Sizes {
    fn for_image(w: u32, h: u32) -> Sizes {
        let k = (w as f64 / 900.0).min(h as f64 / 500.0).clamp(0.6, 2.5);
        Sizes { title: 22.0 * k, legend: 16.0 * k, label: 16.0 * k, value: 14.0 * k, axis: 13.0 * k }
    }
}

/// The plot's chart: x in groups (one unit each), y in percent of the series maximum.
type Plot<'a, 'b> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A legend row: its width in pixels and its items (series index, text, item width).
type LegendRow = (i32, Vec<(usize, String, i32)>);

/// The image's size and the text sizes and horizontal margins every part is laid out with.
struct Frame {
    w: i32,
    h: i32,
    sz: Sizes,
    margin: i32,
    /// The width between the margins.
    avail: i32,
}

fn draw(root: &Area, title: &str, labels: &[String], series: &[Series]) -> DrawResult {
    root.fill(&WHITE)?;
    let (w, h) = root.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    let margin = 12;
    let frame = Frame { w, h, sz: Sizes::for_image(w as u32, h as u32), margin, avail: w - 2 * margin };
    let y = draw_title(root, &frame, title, 10)?;
    let y = draw_legend(root, &frame, series, y)?;
    draw_plot(root, &frame, labels, series, y)
}

/// The title, centred, its top at `y`; returns the `y` under it.
fn draw_title(root: &Area, f: &Frame, title: &str, mut y: i32) -> Result<i32, DrawError> {
    let st = style(f.sz.title, &TEXT);
    if let Some(t) = fit(root, title, &st, f.avail) {
        let (tw, th) = text_size(root, &t, &st);
        root.draw(&Text::new(t, ((f.w - tw) / 2, y), st))?;
        y += th + 12;
    }
    Ok(y)
}

/// The legend: a swatch and "name (unit)" per series, centred, wrapped onto more rows, its
/// top at `y`; returns the `y` under it.
fn draw_legend(root: &Area, f: &Frame, series: &[Series], mut y: i32) -> Result<i32, DrawError> {
    if series.is_empty() {
        return Ok(y);
    }
    let (w, avail) = (f.w, f.avail);
    let st = style(f.sz.legend, &TEXT);
    let line = text_size(root, "Ag", &st).1.max(1);
    let sw = line;
    let gap = 24;
    let mut rows: Vec<LegendRow> = Vec::new();
    let (mut row, mut row_w) = (Vec::new(), 0);
    for (k, s) in series.iter().enumerate() {
        let Some(t) = fit(root, &legend_text(k, s), &st, avail - sw - 6) else { continue };
        let iw = sw + 6 + text_size(root, &t, &st).0;
        if !row.is_empty() && row_w + gap + iw > avail {
            rows.push((row_w, std::mem::take(&mut row)));
            row_w = 0;
        }
        row_w += if row.is_empty() { iw } else { gap + iw };
        row.push((k, t, iw));
    }
    if !row.is_empty() {
        rows.push((row_w, row));
    }
    for (rw, items) in rows {
        let mut x = (w - rw) / 2;
        for (k, t, iw) in items {
            let c = PALETTE[k % PALETTE.len()];
            root.draw(&Rectangle::new([(x, y + 1), (x + sw - 2, y + sw - 1)], c.filled()))?;
            root.draw(&Text::new(t, (x + sw + 6, y), st.clone()))?;
            x += iw + gap;
        }
        y += line + 6;
    }
    Ok(y + 4)
}

/// The plot under `y`: room above for the value over a full-height bar, below for the
/// labels; the axes and grid, then each group's label and bars.
fn draw_plot(root: &Area, f: &Frame, labels: &[String], series: &[Series], y: i32) -> DrawResult {
    let (w, h, margin) = (f.w, f.h, f.margin);
    let n = labels.len().max(series.iter().map(|s| s.values.len()).max().unwrap_or(0));
    let label_st = style(f.sz.label, &TEXT);
    let value_st = style(f.sz.value, &TEXT).pos(Pos::new(HPos::Center, VPos::Bottom));
    let axis_st = style(f.sz.axis, &MUTED);
    let value_h = text_size(root, "0.9", &value_st).1;
    let label_h = text_size(root, "Ag", &label_st).1;
    let y_label_w = text_size(root, "100%", &axis_st).0 + 10;
    let desc_w = text_size(root, "Ag", &axis_st).1 + 8;
    let top = y + value_h + 8;
    let bottom = h - (label_h + 16);
    let (left, right) = (margin + desc_w + y_label_w, w - margin);
    if bottom - top < 24 || right - left < 24 {
        return Ok(()); // too small for a plot: title and legend only
    }
    let area = root.margin(top as u32, (h - bottom) as u32, margin as u32, margin as u32);
    let mut chart = ChartBuilder::on(&area)
        .x_label_area_size(0)
        .y_label_area_size((desc_w + y_label_w) as u32)
        .build_cartesian_2d(0f64..n.max(1) as f64, 0f64..100f64)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(6)
        .y_label_formatter(&|v| format!("{v:.0}%"))
        .y_desc("% of the series maximum")
        .label_style(axis_st.clone())
        .axis_desc_style(axis_st.clone())
        .bold_line_style(GRID)
        .light_line_style(WHITE)
        .axis_style(AXIS)
        .draw()?;
    // The x axis, under the bars.
    let (x0, y0) = chart.backend_coord(&(0.0, 0.0));
    let (x1, _) = chart.backend_coord(&(n.max(1) as f64, 0.0));
    root.draw(&Rectangle::new([(x0, y0 + 1), (x1, y0 + 1)], AXIS.filled()))?;
    if n == 0 {
        let st = style(f.sz.label, &MUTED).pos(Pos::new(HPos::Center, VPos::Center));
        root.draw(&Text::new("no data", ((left + right) / 2, (top + bottom) / 2), st))?;
        return Ok(());
    }
    let maxes = series.iter().map(series_max).collect();
    let groups = Groups { labels, series, maxes, group_px: (x1 - x0) as f64 / n as f64 };
    for i in 0..n {
        draw_group(root, f, &mut chart, &groups, i)?;
    }
    Ok(())
}

/// What every group of the plot is drawn from.
struct Groups<'s> {
    labels: &'s [String],
    series: &'s [Series],
    /// Each series' [`series_max`].
    maxes: Vec<f64>,
    /// A group's width in pixels.
    group_px: f64,
}

/// Group `i`: the tick and label under it, and one bar per series with its value above.
fn draw_group(root: &Area, f: &Frame, chart: &mut Plot, g: &Groups, i: usize) -> DrawResult {
    let label_st = style(f.sz.label, &TEXT);
    let value_st = style(f.sz.value, &TEXT).pos(Pos::new(HPos::Center, VPos::Bottom));
    let (_, y0) = chart.backend_coord(&(0.0, 0.0));
    let gx = i as f64;
    // Tick and label under the group.
    let (cx, _) = chart.backend_coord(&(gx + 0.5, 0.0));
    root.draw(&PathElement::new(vec![(cx, y0 + 1), (cx, y0 + 6)], AXIS))?;
    if let Some(label) = g.labels.get(i)
        && let Some(t) = fit(root, label, &label_st, g.group_px as i32 - 4)
    {
        let st = label_st.pos(Pos::new(HPos::Center, VPos::Top));
        root.draw(&Text::new(t, (cx, y0 + 9), st))?;
    }
    let (series, group_px) = (g.series, g.group_px);
    let m = series.len();
    if m == 0 {
        return Ok(());
    }
    // Bars: 80% of the group's width, split evenly between the series.
    let slot = 0.8 / m as f64;
    let gap = if slot * group_px >= 8.0 { slot * 0.12 } else { 0.0 };
    for (k, s) in series.iter().enumerate() {
        let Some(&v) = s.values.get(i) else { continue };
        let (bx0, bx1) = (gx + 0.1 + slot * k as f64 + gap / 2.0, gx + 0.1 + slot * (k + 1) as f64 - gap / 2.0);
        let frac = if v.is_finite() && g.maxes[k] > 0.0 { (v / g.maxes[k]).clamp(0.0, 1.0) } else { 0.0 };
        let c = PALETTE[k % PALETTE.len()];
        if frac > 0.0 {
            chart.draw_series(std::iter::once(Rectangle::new([(bx0, 0.0), (bx1, frac * 100.0)], c.filled())))?;
        }
        let t = format_value(v);
        let slot_px = ((bx1 - bx0) * group_px) as i32;
        let st = if text_size(root, &t, &value_st).0 <= slot_px + 6 {
            value_st.clone()
        } else {
            style(f.sz.value * 0.75, &TEXT).pos(Pos::new(HPos::Center, VPos::Bottom))
        };
        let (px, py) = chart.backend_coord(&((bx0 + bx1) / 2.0, frac * 100.0));
        root.draw(&Text::new(t, (px, py - 3), st))?;
    }
    Ok(())
}

/// The largest finite positive value of `s`, 0 where it has none: its bars' full height.
fn series_max(s: &Series) -> f64 {
    s.values.iter().copied().filter(|v| v.is_finite() && *v > 0.0).fold(0.0, f64::max)
}

fn legend_text(k: usize, s: &Series) -> String {
    let name = s.name.trim();
    let unit = s.unit.trim();
    match (name.is_empty(), unit.is_empty()) {
        (true, true) => format!("series {}", k + 1),
        (false, true) => name.to_string(),
        (true, false) => format!("series {} ({unit})", k + 1),
        (false, false) => format!("{name} ({unit})"),
    }
}

/// A value as printed above its bar: "9000", "12.5", "3.14", "0.125", "1.5e9"; "n/a" when not finite.
fn format_value(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".to_string();
    }
    let a = v.abs();
    let s = if a == 0.0 {
        return "0".to_string();
    } else if !(1e-3..1e7).contains(&a) {
        return format!("{v:.2e}");
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Image {
        width: u32,
        height: u32,
        rgb: Vec<u8>,
    }

    /// Decodes PNG bytes (the `png` crate checks the signature, chunk CRCs and zlib stream).
    fn decode(bytes: &[u8]) -> Image {
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("a valid PNG header");
        let mut buf = vec![0; reader.output_buffer_size().expect("a buffer size")];
        let info = reader.next_frame(&mut buf).expect("valid image data");
        assert_eq!((info.color_type, info.bit_depth), (png::ColorType::Rgb, png::BitDepth::Eight));
        buf.truncate(info.buffer_size());
        Image { width: info.width, height: info.height, rgb: buf }
    }

    impl Image {
        fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
            let i = (y as usize * self.width as usize + x as usize) * 3;
            [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
        }

        /// Heights of the bars of colour `c`, left to right: found along the lowest row holding that
        /// colour (the row just above the x axis), measured upwards at each bar's centre column.
        fn bar_heights(&self, c: RGBColor) -> Vec<u32> {
            let c = [c.0, c.1, c.2];
            let Some(base) = (0..self.height).rev().find(|&y| (0..self.width).any(|x| self.pixel(x, y) == c)) else {
                return Vec::new();
            };
            let mut heights = Vec::new();
            let mut x = 0;
            while x < self.width {
                if self.pixel(x, base) != c {
                    x += 1;
                    continue;
                }
                let start = x;
                while x < self.width && self.pixel(x, base) == c {
                    x += 1;
                }
                let mid = (start + x) / 2;
                let mut h = 0;
                while h <= base && self.pixel(mid, base - h) == c {
                    h += 1;
                }
                heights.push(h);
            }
            heights
        }

        /// Pixels darker than mid-grey (text, axes) in the rows `y0..y1`.
        fn dark_pixels(&self, y0: u32, y1: u32) -> usize {
            (y0..y1.min(self.height))
                .flat_map(|y| (0..self.width).map(move |x| (x, y)))
                .filter(|&(x, y)| self.pixel(x, y).iter().all(|&v| v < 128))
                .count()
        }
    }

    fn s(name: &str, unit: &str, values: &[f64]) -> Series {
        Series { name: name.into(), unit: unit.into(), values: values.to_vec() }
    }

    fn labels(l: &[&str]) -> Vec<String> {
        l.iter().map(|x| x.to_string()).collect()
    }

    fn sample() -> Vec<u8> {
        bar_chart_png(
            "BERT ablation",
            &labels(&["none", "+pool", "+reuse", "+parallel", "+mapping"]),
            &[
                s("latency", "ms", &[9000.0, 8800.0, 8700.0, 6000.0, 2500.0]),
                s("memory", "MiB", &[3000.0, 3100.0, 1700.0, 1700.0, 1600.0]),
            ],
            900,
            500,
        )
        .unwrap()
    }

    #[test]
    fn png_structure_is_valid() {
        let png = sample();
        assert!(png.starts_with(&[0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n']));
        let img = decode(&png);
        assert_eq!((img.width, img.height), (900, 500));
        // Text is drawn: the title band and the label band under the axis hold dark pixels.
        assert!(img.dark_pixels(0, 40) > 100, "no title");
        assert!(img.dark_pixels(470, 500) > 100, "no labels");
    }

    #[test]
    fn ihdr_matches_requested_size() {
        for (w, h) in [(1, 1), (3, 2), (900, 500), (640, 1), (1, 480), (123, 77)] {
            let img = decode(&bar_chart_png("t", &labels(&["a"]), &[s("x", "u", &[1.0])], w, h).unwrap());
            assert_eq!((img.width, img.height), (w, h));
        }
    }

    #[test]
    fn bars_follow_each_series_own_scale() {
        let png = bar_chart_png(
            "scales",
            &labels(&["a", "b", "c"]),
            &[s("lat", "ms", &[10.0, 20.0, 40.0]), s("mem", "MiB", &[4000.0, 2000.0, 1000.0])],
            600,
            400,
        )
        .unwrap();
        let img = decode(&png);
        let a = img.bar_heights(PALETTE[0]);
        let b = img.bar_heights(PALETTE[1]);
        assert_eq!(a.len(), 3, "{a:?}");
        assert_eq!(b.len(), 3, "{b:?}");
        // Both maxima reach the same full height.
        assert_eq!(a[2], b[0]);
        let full = a[2] as f64;
        assert!(full > 100.0);
        for (got, want) in [(a[0], 0.25), (a[1], 0.5), (b[1], 0.5), (b[2], 0.25)] {
            assert!((got as f64 - want * full).abs() <= 1.0, "{got} vs {want} of {full}");
        }
    }

    #[test]
    fn empty_and_odd_inputs_do_not_panic() {
        let nan = f64::NAN;
        type Case = (String, Vec<String>, Vec<Series>, u32, u32);
        let cases: Vec<Case> = vec![
            (String::new(), vec![], vec![], 0, 0),
            (String::new(), vec![], vec![], 900, 500),
            ("only labels".into(), labels(&["a", "b"]), vec![], 900, 500),
            ("only series".into(), vec![], vec![s("x", "", &[1.0, 2.0])], 900, 500),
            ("empty series".into(), labels(&["a"]), vec![s("", "", &[])], 900, 500),
            (
                "odd values".into(),
                labels(&["a", "b", "c", "d", "e", "f"]),
                vec![
                    s("nan", "x", &[nan, f64::INFINITY, f64::NEG_INFINITY, -5.0, 0.0, -0.0]),
                    s("zeros", "y", &[0.0, 0.0]),
                    s("neg", "z", &[-1.0, -2.0, -3.0]),
                    s("huge", "w", &[f64::MAX, 1e300, f64::MIN_POSITIVE, 1e-300]),
                ],
                900,
                500,
            ),
            ("mismatch".into(), labels(&["a"]), vec![s("x", "u", &[1.0, 2.0, 3.0]), s("y", "v", &[])], 900, 500),
            ("tiny".into(), labels(&["a", "b"]), vec![s("x", "u", &[1.0, 2.0])], 1, 1),
            ("small".into(), labels(&["a", "b"]), vec![s("x", "u", &[1.0, 2.0])], 20, 15),
            ("small2".into(), labels(&["a", "b"]), vec![s("x", "u", &[1.0, 2.0])], 60, 90),
            ("narrow".into(), labels(&["a"; 0]), vec![s("x", "u", &vec![1.0; 2000])], 300, 200),
            ("x".repeat(10_000), vec!["y".repeat(10_000); 3], vec![s(&"n".repeat(5000), "µs→ü", &[1.0])], 900, 500),
            ("ünïcödé ✓".into(), labels(&["日本", "\t\n"]), vec![s("é", "°", &[1.0, 2.0])], 900, 500),
            (
                "many series".into(),
                labels(&["a", "b"]),
                (0..40).map(|k| s("s", "u", &[k as f64, 1.0])).collect(),
                900,
                500,
            ),
            ("huge".into(), labels(&["a"]), vec![s("x", "u", &[1.0])], u32::MAX, 3),
        ];
        for (title, l, series, w, h) in &cases {
            let img = decode(&bar_chart_png(title, l, series, *w, *h).unwrap());
            assert_eq!(img.width, (*w).clamp(1, MAX_DIM));
            assert_eq!(img.height, (*h).clamp(1, MAX_DIM));
        }
    }

    #[test]
    fn values_are_formatted_compactly() {
        assert_eq!(format_value(1234.0), "1234");
        assert_eq!(format_value(9000.0), "9000");
        assert_eq!(format_value(12.5), "12.5");
        assert_eq!(format_value(12.0), "12");
        assert_eq!(format_value(4.567), "4.57");
        assert_eq!(format_value(0.125), "0.125");
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(-0.0), "0");
        assert_eq!(format_value(-7.5), "-7.5");
        assert_eq!(format_value(99.96), "100");
        assert_eq!(format_value(1.5e9), "1.50e9");
        assert_eq!(format_value(f64::NAN), "n/a");
        assert_eq!(format_value(f64::INFINITY), "n/a");
    }

    #[test]
    fn long_text_is_cut_to_fit() {
        register_font().unwrap();
        let mut buf = vec![255u8; 200 * 50 * 3];
        let root = BitMapBackend::with_buffer(&mut buf, (200, 50)).into_drawing_area();
        let st = style(16.0, &TEXT);
        assert_eq!(fit(&root, "abc", &st, 1000).as_deref(), Some("abc"));
        assert_eq!(fit(&root, "  a\tb  ", &st, 1000).as_deref(), Some("a b"));
        let t = fit(&root, &"z".repeat(10_000), &st, 60).unwrap();
        assert!(t.ends_with('…') && text_size(&root, &t, &st).0 <= 60, "{t}");
        assert_eq!(fit(&root, "abcdef", &st, 3), None);
        assert_eq!(fit(&root, "abc", &st, -3), None);
        assert_eq!(fit(&root, " ", &st, 100), None);
    }
}
