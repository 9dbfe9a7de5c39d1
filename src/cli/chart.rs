//! Grouped bar charts rendered straight to PNG, with no dependencies.
//!
//! Everything is done by hand: an RGB pixel buffer, a built-in 5x7 bitmap font (ASCII 32..126, drawn
//! at scale 2 where it fits), and a PNG encoder that writes the image data as a zlib stream of
//! *stored* (uncompressed) deflate blocks. The output is larger than a compressed PNG would be but is
//! valid for every viewer, and the code stays small and obviously correct.
//!
//! The chart has one group of bars per label, one bar per series in each group, and every series is
//! scaled to its own maximum (so latency in ms and memory in MiB can share one chart): the y axis is
//! "% of the series maximum", and the real value is printed above each bar.

/// One bar group per configuration, with two series (e.g. latency and memory), each scaled to its own maximum.
pub struct Series {
    pub name: String,
    pub unit: String,
    pub values: Vec<f64>,
}

/// Largest width or height rendered; larger requests are clamped (and 0 becomes 1).
const MAX_DIM: u32 = 4096;

type Rgb = [u8; 3];

const WHITE: Rgb = [255, 255, 255];
const TEXT: Rgb = [34, 34, 34];
const AXIS: Rgb = [90, 90, 90];
const GRID: Rgb = [226, 226, 226];
const MUTED: Rgb = [120, 120, 120];

/// Series colours, cycled when there are more series than colours.
const PALETTE: [Rgb; 6] =
    [[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189], [140, 86, 75]];

/// Renders a grouped bar chart as PNG bytes: title at the top, one group per label on the x axis
/// (label text under each group), one colour per series with a legend ("name (unit)"), the value printed
/// above each bar (e.g. "1234" or "12.5"), and for each series its own scale (bars of series k are
/// values[k][i] / max(values[k])). Size width x height pixels (e.g. 900 x 500).
///
/// Never panics. The number of groups is the larger of `labels.len()` and the longest series; a
/// missing value draws no bar, a non-finite value draws no bar and prints "n/a", zero and negative
/// values draw no bar but print their value, and a series whose maximum is not positive draws no bars.
/// Width and height are clamped to 1..=4096.
pub fn bar_chart_png(title: &str, labels: &[String], series: &[Series], width: u32, height: u32) -> Vec<u8> {
    let w = width.clamp(1, MAX_DIM);
    let h = height.clamp(1, MAX_DIM);
    let mut canvas = Canvas::new(w as usize, h as usize, WHITE);
    render(&mut canvas, title, labels, series);
    encode_png(w, h, &canvas.px)
}

// ---------------------------------------------------------------------------------------------
// Layout

fn render(c: &mut Canvas, title: &str, labels: &[String], series: &[Series]) {
    let w = c.w as i64;
    let h = c.h as i64;
    let margin = 12;
    let avail = w - 2 * margin;
    let mut y = 10;

    // Title.
    if let Some((t, s)) = fit_text(title.trim(), avail) {
        c.text((w - text_width(&t, s)) / 2, y, &t, s, TEXT);
        y += GLYPH_H * s + 10;
    }

    // Legend: a swatch and "name (unit)" per series, centred, wrapped onto more rows if needed.
    if !series.is_empty() {
        let texts: Vec<String> = series.iter().enumerate().map(|(k, s)| legend_text(k, s)).collect();
        let gap = 24;
        let row_width = |scale: i64| -> i64 {
            let items: i64 = texts.iter().map(|t| CAP_H * scale + 6 + text_width(t, scale)).sum();
            items + gap * (texts.len() as i64 - 1)
        };
        let scale = if row_width(2) <= avail { 2 } else { 1 };
        let sw = CAP_H * scale;
        let mut rows: Vec<(i64, Vec<(usize, String)>)> = Vec::new();
        let mut row: Vec<(usize, String)> = Vec::new();
        let mut row_w = 0;
        for (k, t) in texts.iter().enumerate() {
            let t = truncate_to(t, avail - sw - 6, scale);
            let iw = sw + 6 + text_width(&t, scale);
            if !row.is_empty() && row_w + gap + iw > avail {
                rows.push((row_w, std::mem::take(&mut row)));
                row_w = 0;
            }
            row_w += if row.is_empty() { iw } else { gap + iw };
            row.push((k, t));
        }
        if !row.is_empty() {
            rows.push((row_w, row));
        }
        for (rw, items) in rows {
            let mut x = (w - rw) / 2;
            for (k, t) in items {
                c.fill_rect(x, y, x + sw, y + sw, PALETTE[k % PALETTE.len()]);
                c.text(x + sw + 6, y, &t, scale, TEXT);
                x += sw + 6 + text_width(&t, scale) + gap;
            }
            y += GLYPH_H * scale + 6;
        }
        y += 4;
    }

    // Plot area: room above for the value printed over a full-height bar, below for the labels,
    // at the left for the "100%" grid labels.
    let top = y + GLYPH_H * 2 + 8;
    let bottom = h - (GLYPH_H * 2 + 20); // the row of the x axis
    let left = margin + text_width("100%", 1) + 6;
    let right = w - margin;
    if bottom - top < 8 || right - left < 8 {
        return; // too small for a plot: title and legend only
    }

    for q in 1..=4 {
        let gy = bottom - (bottom - top) * q / 4;
        c.fill_rect(left + 1, gy, right, gy + 1, GRID);
        let t = format!("{}%", q * 25);
        c.text(left - 4 - text_width(&t, 1), gy - GLYPH_H / 2, &t, 1, MUTED);
    }
    c.fill_rect(left, top, left + 1, bottom + 1, AXIS);
    c.fill_rect(left, bottom, right, bottom + 1, AXIS);

    let n = labels.len().max(series.iter().map(|s| s.values.len()).max().unwrap_or(0));
    if n == 0 {
        let t = "no data";
        c.text((left + right - text_width(t, 2)) / 2, (top + bottom) / 2 - GLYPH_H, t, 2, MUTED);
        return;
    }

    let plot_h = (bottom - top) as f64;
    let group_w = (right - left) as f64 / n as f64;
    let m = series.len();
    let maxes: Vec<f64> = series
        .iter()
        .map(|s| s.values.iter().copied().filter(|v| v.is_finite() && *v > 0.0).fold(0.0, f64::max))
        .collect();

    for i in 0..n {
        let gx0 = left as f64 + group_w * i as f64;

        // Tick and label under the group.
        let cx = (gx0 + group_w / 2.0).round() as i64;
        c.fill_rect(cx, bottom + 1, cx + 1, bottom + 5, AXIS);
        if let Some(label) = labels.get(i)
            && let Some((t, s)) = fit_text(label.trim(), group_w as i64 - 4)
        {
            c.text(cx - text_width(&t, s) / 2, bottom + 9, &t, s, TEXT);
        }
        if m == 0 {
            continue;
        }

        // Bars: 80% of the group's width, split evenly between the series.
        let slot = group_w * 0.8 / m as f64;
        let gap = if slot >= 8.0 { (slot * 0.12).clamp(1.0, 8.0) } else { 0.0 };
        for (k, s) in series.iter().enumerate() {
            let Some(&v) = s.values.get(i) else { continue };
            let sx0 = gx0 + group_w * 0.1 + slot * k as f64;
            let x0 = (sx0 + gap / 2.0).round() as i64;
            let x1 = ((sx0 + slot - gap / 2.0).round() as i64).max(x0 + 1);
            let frac = if v.is_finite() && maxes[k] > 0.0 { (v / maxes[k]).clamp(0.0, 1.0) } else { 0.0 };
            let mut bh = (frac * plot_h).round() as i64;
            if frac > 0.0 && bh == 0 {
                bh = 1;
            }
            c.fill_rect(x0, bottom - bh, x1, bottom, PALETTE[k % PALETTE.len()]);

            let t = format_value(v);
            let scale = if text_width(&t, 2) <= slot as i64 { 2 } else { 1 };
            let bx = (x0 + x1) / 2;
            let ty = bottom - bh - 4 - GLYPH_H * scale;
            c.text(bx - text_width(&t, scale) / 2, ty, &t, scale, TEXT);
        }
    }
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

/// The text at scale 2 if it fits in `max_w` pixels, else at scale 1, else truncated with "..";
/// `None` when not even that fits.
fn fit_text(s: &str, max_w: i64) -> Option<(String, i64)> {
    if s.is_empty() || max_w <= 0 {
        return None;
    }
    if text_width(s, 2) <= max_w {
        return Some((s.to_string(), 2));
    }
    let t = truncate_to(s, max_w, 1);
    if t.is_empty() { None } else { Some((t, 1)) }
}

/// `s` cut (with a trailing "..") so it is at most `max_w` pixels wide at `scale`.
fn truncate_to(s: &str, max_w: i64, scale: i64) -> String {
    if text_width(s, scale) <= max_w {
        return s.to_string();
    }
    let fit = ((max_w + scale) / (ADVANCE * scale)).max(0) as usize; // chars that fit
    if fit < 3 {
        return String::new();
    }
    let mut t: String = s.chars().take(fit - 2).collect();
    t.push_str("..");
    t
}

// ---------------------------------------------------------------------------------------------
// Pixel buffer and text

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn new(w: usize, h: usize, bg: Rgb) -> Self {
        let mut px = Vec::with_capacity(w * h * 3);
        for _ in 0..w * h {
            px.extend_from_slice(&bg);
        }
        Canvas { w, h, px }
    }

    /// Fills `[x0, x1) x [y0, y1)`, clipped to the canvas.
    fn fill_rect(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: Rgb) {
        let (w, h) = (self.w as i64, self.h as i64);
        let (x0, x1) = (x0.clamp(0, w) as usize, x1.clamp(0, w) as usize);
        let (y0, y1) = (y0.clamp(0, h) as usize, y1.clamp(0, h) as usize);
        if x0 >= x1 || y0 >= y1 {
            return;
        }
        for y in y0..y1 {
            let row = &mut self.px[(y * self.w + x0) * 3..(y * self.w + x1) * 3];
            for p in row.chunks_exact_mut(3) {
                p.copy_from_slice(&c);
            }
        }
    }

    /// Draws `s` with its top-left corner at (x, y), each font pixel a `scale` x `scale` square.
    fn text(&mut self, x: i64, y: i64, s: &str, scale: i64, c: Rgb) {
        let scale = scale.max(1);
        let mut cx = x;
        for ch in s.chars() {
            if cx >= self.w as i64 {
                break;
            }
            if cx + GLYPH_W * scale > 0 {
                let g = glyph(ch);
                for (col, bits) in g.iter().enumerate() {
                    for row in 0..GLYPH_H {
                        if bits >> row & 1 == 1 {
                            let px = cx + col as i64 * scale;
                            let py = y + row * scale;
                            self.fill_rect(px, py, px + scale, py + scale, c);
                        }
                    }
                }
            }
            cx += ADVANCE * scale;
        }
    }
}

const GLYPH_W: i64 = 5;
/// Glyph cell height: 7 rows for capitals and digits, an 8th for descenders (g j p q y ,).
const GLYPH_H: i64 = 8;
/// Height of capitals and digits, used for the legend swatches.
const CAP_H: i64 = 7;
const ADVANCE: i64 = 6;

/// Width in pixels of `s` drawn at `scale` (no trailing gap).
fn text_width(s: &str, scale: i64) -> i64 {
    let n = s.chars().count() as i64;
    if n == 0 { 0 } else { (n * ADVANCE - 1) * scale }
}

fn glyph(ch: char) -> &'static [u8; 5] {
    let code = ch as u32;
    let idx = if (32..=126).contains(&code) { code - 32 } else { '?' as u32 - 32 };
    &FONT[idx as usize]
}

/// 5x7 font (plus a descender row) for ASCII 32..=126: five columns per glyph, bit 0 is the top row.
static FONT: [[u8; 5]; 95] = [
    [0x00, 0x00, 0x00, 0x00, 0x00], // ' '
    [0x00, 0x00, 0x5F, 0x00, 0x00], // !
    [0x00, 0x07, 0x00, 0x07, 0x00], // "
    [0x14, 0x7F, 0x14, 0x7F, 0x14], // #
    [0x24, 0x2A, 0x7F, 0x2A, 0x12], // $
    [0x23, 0x13, 0x08, 0x64, 0x62], // %
    [0x36, 0x49, 0x55, 0x22, 0x50], // &
    [0x00, 0x05, 0x03, 0x00, 0x00], // '
    [0x00, 0x1C, 0x22, 0x41, 0x00], // (
    [0x00, 0x41, 0x22, 0x1C, 0x00], // )
    [0x14, 0x08, 0x3E, 0x08, 0x14], // *
    [0x08, 0x08, 0x3E, 0x08, 0x08], // +
    [0x00, 0xA0, 0x60, 0x00, 0x00], // ,
    [0x08, 0x08, 0x08, 0x08, 0x08], // -
    [0x00, 0x60, 0x60, 0x00, 0x00], // .
    [0x20, 0x10, 0x08, 0x04, 0x02], // /
    [0x3E, 0x51, 0x49, 0x45, 0x3E], // 0
    [0x00, 0x42, 0x7F, 0x40, 0x00], // 1
    [0x42, 0x61, 0x51, 0x49, 0x46], // 2
    [0x21, 0x41, 0x45, 0x4B, 0x31], // 3
    [0x18, 0x14, 0x12, 0x7F, 0x10], // 4
    [0x27, 0x45, 0x45, 0x45, 0x39], // 5
    [0x3C, 0x4A, 0x49, 0x49, 0x30], // 6
    [0x01, 0x71, 0x09, 0x05, 0x03], // 7
    [0x36, 0x49, 0x49, 0x49, 0x36], // 8
    [0x06, 0x49, 0x49, 0x29, 0x1E], // 9
    [0x00, 0x36, 0x36, 0x00, 0x00], // :
    [0x00, 0x56, 0x36, 0x00, 0x00], // ;
    [0x08, 0x14, 0x22, 0x41, 0x00], // <
    [0x14, 0x14, 0x14, 0x14, 0x14], // =
    [0x00, 0x41, 0x22, 0x14, 0x08], // >
    [0x02, 0x01, 0x51, 0x09, 0x06], // ?
    [0x32, 0x49, 0x79, 0x41, 0x3E], // @
    [0x7E, 0x11, 0x11, 0x11, 0x7E], // A
    [0x7F, 0x49, 0x49, 0x49, 0x36], // B
    [0x3E, 0x41, 0x41, 0x41, 0x22], // C
    [0x7F, 0x41, 0x41, 0x22, 0x1C], // D
    [0x7F, 0x49, 0x49, 0x49, 0x41], // E
    [0x7F, 0x09, 0x09, 0x09, 0x01], // F
    [0x3E, 0x41, 0x49, 0x49, 0x7A], // G
    [0x7F, 0x08, 0x08, 0x08, 0x7F], // H
    [0x00, 0x41, 0x7F, 0x41, 0x00], // I
    [0x20, 0x40, 0x41, 0x3F, 0x01], // J
    [0x7F, 0x08, 0x14, 0x22, 0x41], // K
    [0x7F, 0x40, 0x40, 0x40, 0x40], // L
    [0x7F, 0x02, 0x0C, 0x02, 0x7F], // M
    [0x7F, 0x04, 0x08, 0x10, 0x7F], // N
    [0x3E, 0x41, 0x41, 0x41, 0x3E], // O
    [0x7F, 0x09, 0x09, 0x09, 0x06], // P
    [0x3E, 0x41, 0x51, 0x21, 0x5E], // Q
    [0x7F, 0x09, 0x19, 0x29, 0x46], // R
    [0x46, 0x49, 0x49, 0x49, 0x31], // S
    [0x01, 0x01, 0x7F, 0x01, 0x01], // T
    [0x3F, 0x40, 0x40, 0x40, 0x3F], // U
    [0x1F, 0x20, 0x40, 0x20, 0x1F], // V
    [0x3F, 0x40, 0x38, 0x40, 0x3F], // W
    [0x63, 0x14, 0x08, 0x14, 0x63], // X
    [0x07, 0x08, 0x70, 0x08, 0x07], // Y
    [0x61, 0x51, 0x49, 0x45, 0x43], // Z
    [0x00, 0x7F, 0x41, 0x41, 0x00], // [
    [0x02, 0x04, 0x08, 0x10, 0x20], // backslash
    [0x00, 0x41, 0x41, 0x7F, 0x00], // ]
    [0x04, 0x02, 0x01, 0x02, 0x04], // ^
    [0x40, 0x40, 0x40, 0x40, 0x40], // _
    [0x00, 0x01, 0x02, 0x04, 0x00], // `
    [0x20, 0x54, 0x54, 0x54, 0x78], // a
    [0x7F, 0x48, 0x44, 0x44, 0x38], // b
    [0x38, 0x44, 0x44, 0x44, 0x20], // c
    [0x38, 0x44, 0x44, 0x48, 0x7F], // d
    [0x38, 0x54, 0x54, 0x54, 0x18], // e
    [0x08, 0x7E, 0x09, 0x01, 0x02], // f
    [0x18, 0xA4, 0xA4, 0xA4, 0x7C], // g
    [0x7F, 0x08, 0x04, 0x04, 0x78], // h
    [0x00, 0x44, 0x7D, 0x40, 0x00], // i
    [0x40, 0x80, 0x84, 0x7D, 0x00], // j
    [0x7F, 0x10, 0x28, 0x44, 0x00], // k
    [0x00, 0x41, 0x7F, 0x40, 0x00], // l
    [0x7C, 0x04, 0x18, 0x04, 0x78], // m
    [0x7C, 0x08, 0x04, 0x04, 0x78], // n
    [0x38, 0x44, 0x44, 0x44, 0x38], // o
    [0xFC, 0x24, 0x24, 0x24, 0x18], // p
    [0x18, 0x24, 0x24, 0x24, 0xFC], // q
    [0x7C, 0x08, 0x04, 0x04, 0x08], // r
    [0x48, 0x54, 0x54, 0x54, 0x20], // s
    [0x04, 0x3F, 0x44, 0x40, 0x20], // t
    [0x3C, 0x40, 0x40, 0x20, 0x7C], // u
    [0x1C, 0x20, 0x40, 0x20, 0x1C], // v
    [0x3C, 0x40, 0x30, 0x40, 0x3C], // w
    [0x44, 0x28, 0x10, 0x28, 0x44], // x
    [0x1C, 0xA0, 0xA0, 0xA0, 0x7C], // y
    [0x44, 0x64, 0x54, 0x4C, 0x44], // z
    [0x00, 0x08, 0x36, 0x41, 0x00], // {
    [0x00, 0x00, 0x7F, 0x00, 0x00], // |
    [0x00, 0x41, 0x36, 0x08, 0x00], // }
    [0x08, 0x04, 0x08, 0x10, 0x08], // ~
];

// ---------------------------------------------------------------------------------------------
// PNG encoding

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1A, b'\n'];

/// PNG of an 8-bit RGB image (`rgb` is `h` rows of `3 * w` bytes).
fn encode_png(w: u32, h: u32, rgb: &[u8]) -> Vec<u8> {
    let stride = (w as usize * 3).max(1);
    let mut raw = Vec::with_capacity(h as usize * (stride + 1));
    for row in rgb.chunks(stride).take(h as usize) {
        raw.push(0); // filter type: None
        raw.extend_from_slice(row);
    }

    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // bit depth 8, colour type 2 (RGB), deflate, filter 0, no interlace

    let idat = zlib_stored(&raw);
    let mut out = Vec::with_capacity(PNG_SIGNATURE.len() + 3 * 12 + ihdr.len() + idat.len());
    out.extend_from_slice(&PNG_SIGNATURE);
    write_chunk(&mut out, b"IHDR", &ihdr);
    write_chunk(&mut out, b"IDAT", &idat);
    write_chunk(&mut out, b"IEND", &[]);
    out
}

fn write_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = !crc32_update(crc32_update(!0, kind), data);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A zlib stream holding `data` in stored (uncompressed) deflate blocks of at most 65535 bytes.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    const MAX_BLOCK: usize = 65535;
    let blocks = data.len().div_ceil(MAX_BLOCK).max(1);
    let mut z = Vec::with_capacity(2 + data.len() + 5 * blocks + 4);
    z.extend_from_slice(&[0x78, 0x01]); // deflate, 32 KiB window, no dictionary, fastest; (0x7801 % 31 == 0)
    if data.is_empty() {
        z.extend_from_slice(&[0x01, 0x00, 0x00, 0xFF, 0xFF]);
    }
    let mut chunks = data.chunks(MAX_BLOCK).peekable();
    while let Some(block) = chunks.next() {
        let last = chunks.peek().is_none();
        z.push(u8::from(last)); // BFINAL in bit 0, BTYPE = 00 (stored), rest of the byte padding
        let len = block.len() as u16;
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&(!len).to_le_bytes());
        z.extend_from_slice(block);
    }
    z.extend_from_slice(&adler32(data).to_be_bytes());
    z
}

fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 is the most bytes that can be summed before `b` could overflow a u32.
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += x as u32;
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

static CRC_TABLE: [u32; 256] = crc_table();

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
}

/// Feeds `data` into a running CRC-32 (start from `!0`, finish with `!`).
fn crc32_update(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = CRC_TABLE[((crc ^ b as u32) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Png {
        width: u32,
        height: u32,
        /// Decompressed image data: per row, a filter byte then 3 * width bytes.
        raw: Vec<u8>,
    }

    fn be32(b: &[u8]) -> u32 {
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Bit-at-a-time CRC-32, independent of the table the encoder uses.
    fn crc32_slow(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
            }
        }
        !crc
    }

    fn adler32_slow(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u64, 0u64);
        for &x in data {
            a = (a + x as u64) % 65521;
            b = (b + a) % 65521;
        }
        ((b << 16) | a) as u32
    }

    /// Inflates a zlib stream made of stored deflate blocks only; checks the header and Adler-32.
    fn inflate_stored(z: &[u8]) -> Vec<u8> {
        assert!(z.len() >= 6, "zlib stream too short");
        let (cmf, flg) = (z[0], z[1]);
        assert_eq!(cmf & 0x0F, 8, "compression method is not deflate");
        assert!(cmf >> 4 <= 7, "window too large");
        assert_eq!((cmf as u16 * 256 + flg as u16) % 31, 0, "FCHECK");
        assert_eq!(flg & 0x20, 0, "preset dictionary");
        let mut pos = 2;
        let mut out = Vec::new();
        loop {
            let hdr = z[pos];
            pos += 1;
            assert_eq!((hdr >> 1) & 3, 0, "not a stored block");
            let len = u16::from_le_bytes([z[pos], z[pos + 1]]);
            let nlen = u16::from_le_bytes([z[pos + 2], z[pos + 3]]);
            assert_eq!(len, !nlen, "LEN/NLEN mismatch");
            pos += 4;
            out.extend_from_slice(&z[pos..pos + len as usize]);
            pos += len as usize;
            if hdr & 1 == 1 {
                break;
            }
        }
        assert_eq!(z.len(), pos + 4, "trailing bytes after the Adler-32");
        assert_eq!(be32(&z[pos..]), adler32_slow(&out), "Adler-32 mismatch");
        out
    }

    /// Parses and checks a PNG: signature, chunk order, every CRC, IHDR fields, the image data size.
    fn decode(png: &[u8]) -> Png {
        assert!(png.starts_with(&[0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]), "PNG signature");
        let mut pos = 8;
        let mut kinds = Vec::new();
        let mut ihdr = Vec::new();
        let mut idat = Vec::new();
        while pos < png.len() {
            let len = be32(&png[pos..]) as usize;
            let kind = &png[pos + 4..pos + 8];
            let data = &png[pos + 8..pos + 8 + len];
            let crc = be32(&png[pos + 8 + len..]);
            assert_eq!(crc, crc32_slow(&png[pos + 4..pos + 8 + len]), "CRC of chunk {:?}", kind);
            match kind {
                b"IHDR" => ihdr = data.to_vec(),
                b"IDAT" => idat.extend_from_slice(data),
                _ => {}
            }
            kinds.push(kind.to_vec());
            pos += 12 + len;
        }
        assert_eq!(pos, png.len());
        assert_eq!(kinds.first().map(|k| k.as_slice()), Some(&b"IHDR"[..]));
        assert_eq!(kinds.last().map(|k| k.as_slice()), Some(&b"IEND"[..]));
        assert!(kinds.iter().any(|k| k == b"IDAT"));
        assert_eq!(ihdr.len(), 13);
        let (width, height) = (be32(&ihdr[0..]), be32(&ihdr[4..]));
        assert!(width > 0 && height > 0);
        assert_eq!(&ihdr[8..13], &[8, 2, 0, 0, 0], "8-bit RGB, no interlace");
        let raw = inflate_stored(&idat);
        assert_eq!(raw.len(), height as usize * (1 + 3 * width as usize));
        for row in raw.chunks(1 + 3 * width as usize) {
            assert_eq!(row[0], 0, "filter byte");
        }
        Png { width, height, raw }
    }

    impl Png {
        fn pixel(&self, x: u32, y: u32) -> Rgb {
            let i = y as usize * (1 + 3 * self.width as usize) + 1 + 3 * x as usize;
            [self.raw[i], self.raw[i + 1], self.raw[i + 2]]
        }

        /// Heights of the bars of colour `c`, left to right: found along the lowest row holding that
        /// colour (the row just above the x axis), measured upwards at each bar's centre column.
        fn bar_heights(&self, c: Rgb) -> Vec<u32> {
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
    }

    #[test]
    fn png_structure_is_valid() {
        let png = sample();
        assert!(png.starts_with(&PNG_SIGNATURE));
        let img = decode(&png);
        assert_eq!((img.width, img.height), (900, 500));
        // Several stored blocks are needed for 500 * 2701 bytes.
        assert!(img.raw.len() > 65535);
    }

    #[test]
    fn ihdr_matches_requested_size() {
        for (w, h) in [(1, 1), (3, 2), (900, 500), (640, 1), (1, 480), (123, 77)] {
            let img = decode(&bar_chart_png("t", &labels(&["a"]), &[s("x", "u", &[1.0])], w, h));
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
        );
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
    fn adler_and_crc_known_values() {
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        assert_eq!(adler32(&[]), 1);
        assert_eq!(!crc32_update(!0, b"123456789"), 0xCBF4_3926);
        let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        assert_eq!(adler32(&big), adler32_slow(&big));
        assert_eq!(!crc32_update(!0, &big), crc32_slow(&big));
    }

    #[test]
    fn zlib_stored_round_trips() {
        for n in [0usize, 1, 65534, 65535, 65536, 131070, 131071, 200_000] {
            let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            assert_eq!(inflate_stored(&zlib_stored(&data)), data, "n = {n}");
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
            let img = decode(&bar_chart_png(title, l, series, *w, *h));
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
    fn font_covers_required_characters() {
        let chars = ('0'..='9').chain('a'..='z').chain('A'..='Z').chain("+-.:()%/_,x".chars());
        for ch in chars {
            assert!(glyph(ch).iter().any(|&col| col != 0), "glyph for {ch:?} is blank");
        }
        assert!(glyph(' ').iter().all(|&col| col == 0));
        assert_eq!(glyph('\u{e9}'), glyph('?'));
    }

    #[test]
    fn text_fitting() {
        assert_eq!(text_width("", 2), 0);
        assert_eq!(text_width("ab", 1), 11);
        assert_eq!(fit_text("abc", 1000), Some(("abc".to_string(), 2)));
        assert_eq!(fit_text("abc", 20), Some(("abc".to_string(), 1)));
        let (t, sc) = fit_text(&"z".repeat(100), 60).unwrap();
        assert_eq!(sc, 1);
        assert!(text_width(&t, 1) <= 60 && t.ends_with(".."));
        assert_eq!(fit_text("abcdef", 5), None);
        assert_eq!(fit_text("abc", -3), None);
    }
}
