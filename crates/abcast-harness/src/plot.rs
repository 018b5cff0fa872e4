//! The PNG of a sweep: throughput on top (Mbit/s left axis, values/s right axis), latency
//! below, medians joined by lines and min/max of the runs as whiskers.
//!
//! The font is compiled in (DejaVu Sans, `assets/`, Bitstream Vera licence) and rendered by
//! plotters' `ab_glyph` back-end: a fresh machine or CI image often has no system fonts, and
//! a plot whose labels silently vanish is worse than no plot.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

const FONT_TTF: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
pub(crate) const FONT_FAMILY: &str = "sans-serif";
const WIDTH_PX: u32 = 1100;
const HEIGHT_PX: u32 = 900;

/// Registers the embedded font once per process.
pub(crate) fn ensure_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            for style in [FontStyle::Normal, FontStyle::Bold] {
                plotters::style::register_font(FONT_FAMILY, style, FONT_TTF)
                    .map_err(|_| "the embedded DejaVu Sans font is not a valid TTF".to_string())?;
            }
            Ok(())
        })
        .clone()
}

/// One point of a series: x position, and min / median / max over the runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Whisker {
    pub x: f64,
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

/// What to draw. X positions are plot coordinates (log2 of bytes, or a node count); `x_keys`
/// are where ticks go and `x_label` names them.
pub struct PlotSpec<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub x_keys: Vec<f64>,
    pub x_label: &'a dyn Fn(f64) -> String,
    pub mbit_per_s: Vec<Whisker>,
    pub values_per_s: Vec<Whisker>,
    /// Latencies in milliseconds.
    pub latency_ms_p50: Vec<Whisker>,
    pub latency_ms_p99: Vec<Whisker>,
    /// A light-load point drawn on the latency panel, with its legend text.
    pub low_load_latency_ms_p50: Option<(Whisker, String)>,
}

/// A linear f64 axis whose ticks are exactly the sweep's points. plotters' own
/// `with_key_points` cannot take a custom label formatter on f64 axes, hence this type.
#[derive(Clone)]
pub(crate) struct KeyedAxis {
    lo: f64,
    hi: f64,
    keys: Vec<f64>,
}

impl KeyedAxis {
    /// An axis with a tick at every key and half a key step of room on either side (keys one
    /// apart, as log2 of bytes are); `None` without keys.
    pub(crate) fn around(keys: &[f64]) -> Option<KeyedAxis> {
        let lo = keys
            .iter()
            .copied()
            .filter(|k| k.is_finite())
            .reduce(f64::min)?;
        let hi = keys
            .iter()
            .copied()
            .filter(|k| k.is_finite())
            .reduce(f64::max)?;
        Some(KeyedAxis {
            lo: lo - 0.5,
            hi: hi + 0.5,
            keys: keys.to_vec(),
        })
    }
}

impl Ranged for KeyedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.hi - self.lo;
        if span <= 0.0 {
            return (limit.0 + limit.1) / 2;
        }
        let frac = ((value - self.lo) / span).clamp(-1.0, 2.0);
        limit.0 + (f64::from(limit.1 - limit.0) * frac).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// The latency axis: linear, or logarithmic when the values span more than
/// [`LOG_SPAN_MIN`]x (a light-load point at 0.1 ms next to saturated points at 100 ms would
/// otherwise sit flat on zero). Ticks are 1, 2, 5 times a power of ten on both.
#[derive(Clone)]
pub(crate) struct ValueAxis {
    lo: f64,
    hi: f64,
    log: bool,
}

const LOG_SPAN_MIN: f64 = 50.0;

impl ValueAxis {
    /// A linear axis from 0 to `hi` (1 when `hi` is not a positive number).
    pub(crate) fn linear(hi: f64) -> ValueAxis {
        ValueAxis {
            lo: 0.0,
            hi: if hi.is_finite() && hi > 0.0 { hi } else { 1.0 },
            log: false,
        }
    }

    pub(crate) fn is_log(&self) -> bool {
        self.log
    }

    pub(crate) fn for_values(values: &[f64]) -> ValueAxis {
        let positive: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let max = positive.iter().copied().fold(0.0, f64::max);
        let min = positive.iter().copied().fold(f64::INFINITY, f64::min);
        if max <= 0.0 {
            return ValueAxis {
                lo: 0.0,
                hi: 1.0,
                log: false,
            };
        }
        if max / min > LOG_SPAN_MIN {
            // Head-room of a factor 10 on top for the legend box.
            let lo = 10f64.powf(min.log10().floor());
            ValueAxis {
                lo,
                hi: max * 10.0,
                log: true,
            }
        } else {
            ValueAxis {
                lo: 0.0,
                hi: max * 1.4,
                log: false,
            }
        }
    }

    fn ticks(&self) -> Vec<f64> {
        let mut out = Vec::new();
        if self.log {
            let mut decade = 10f64.powf(self.lo.log10().floor());
            while decade <= self.hi && out.len() < 64 {
                for m in [1.0, 2.0, 5.0] {
                    let v = decade * m;
                    if v >= self.lo && v <= self.hi {
                        out.push(v);
                    }
                }
                decade *= 10.0;
            }
        } else {
            let raw = (self.hi - self.lo) / 8.0;
            let mag = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0]
                .iter()
                .map(|m| m * mag)
                .find(|s| *s >= raw)
                .unwrap_or(raw);
            let mut v = (self.lo / step).ceil() * step;
            while v <= self.hi && out.len() < 64 {
                out.push(v);
                v += step;
            }
        }
        out
    }

    fn frac(&self, v: f64) -> f64 {
        if self.log {
            let v = v.max(self.lo * 1e-3);
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }
}

impl Ranged for ValueAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let frac = self.frac(*value);
        let frac = if frac.is_finite() {
            frac.clamp(-1.0, 2.0)
        } else {
            0.0
        };
        limit.0 + (f64::from(limit.1 - limit.0) * frac).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// A tick label without trailing zeros: 0.05, 0.5, 5, 500.
pub(crate) fn short_number(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn max_of(series: &[&[Whisker]]) -> f64 {
    let m = series
        .iter()
        .flat_map(|s| s.iter())
        .map(|w| w.max.max(w.median))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    // Head-room above the data for the legend box in the upper left corner.
    if m > 0.0 { m * 1.4 } else { 1.0 }
}

fn err(e: impl std::fmt::Display) -> String {
    format!("cannot draw the plot: {e}")
}

/// Draws a sweep: throughput above, latency below, both over the sweep's keys.
pub fn draw(path: &Path, spec: &PlotSpec<'_>) -> Result<(), String> {
    ensure_font()?;
    let (x_lo, x_hi) = match (
        spec.x_keys.iter().copied().reduce(f64::min),
        spec.x_keys.iter().copied().reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) => (lo - 0.5, hi + 0.5),
        _ => return Err("cannot draw the plot: no point".to_string()),
    };
    let x_axis = KeyedAxis {
        lo: x_lo,
        hi: x_hi,
        keys: spec.x_keys.clone(),
    };
    let root = BitMapBackend::new(path, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled(
            spec.title,
            (FONT_FAMILY, 24).into_font().style(FontStyle::Bold),
        )
        .map_err(err)?;
    let (upper, lower) = root.split_vertically(HEIGHT_PX / 2 - 20);
    draw_throughput_panel(&upper, spec, &x_axis)?;
    draw_latency_panel(&lower, spec, &x_axis)?;
    root.present().map_err(err)?;
    Ok(())
}

/// One panel of [`draw`], a half of the picture.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// The upper panel: Mbit/s on the left axis and values/s on the right, medians joined by a
/// line and min/max as whiskers.
fn draw_throughput_panel(
    area: &Area<'_>,
    spec: &PlotSpec<'_>,
    x_axis: &KeyedAxis,
) -> Result<(), String> {
    let blue = RGBColor(31, 119, 180);
    let orange = RGBColor(214, 95, 14);
    let label_font = (FONT_FAMILY, 16);
    let desc_font = (FONT_FAMILY, 18);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Throughput (median of runs; whiskers: min and max)",
            (FONT_FAMILY, 20),
        )
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .right_y_label_area_size(90)
        .build_cartesian_2d(x_axis.clone(), 0.0..max_of(&[&spec.mbit_per_s]))
        .map_err(err)?
        // More head-room on the right axis: with a fixed value size values/s is Mbit/s
        // scaled, and equal scaling would hide one line under the other.
        .set_secondary_coord(x_axis.clone(), 0.0..max_of(&[&spec.values_per_s]) * 1.6);
    chart
        .configure_mesh()
        .x_desc(spec.x_desc)
        .y_desc("throughput (Mbit/s)")
        .x_label_formatter(&|x| (spec.x_label)(*x))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style(label_font)
        .axis_desc_style(desc_font)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    chart
        .configure_secondary_axes()
        .y_desc("values delivered per second")
        .y_label_formatter(&|y| crate::format::group(y.max(0.0).round() as u64))
        .label_style(label_font)
        .axis_desc_style(desc_font)
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(
            spec.mbit_per_s.iter().map(|w| (w.x, w.median)),
            blue.stroke_width(3),
        ))
        .map_err(err)?
        .label("Mbit/s (left axis)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], blue.stroke_width(3)));
    chart
        .draw_series(
            spec.mbit_per_s
                .iter()
                .map(|w| ErrorBar::new_vertical(w.x, w.min, w.median, w.max, blue.filled(), 10)),
        )
        .map_err(err)?;
    chart
        .draw_secondary_series(LineSeries::new(
            spec.values_per_s.iter().map(|w| (w.x, w.median)),
            orange.stroke_width(2),
        ))
        .map_err(err)?
        .label("values/s (right axis)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], orange.stroke_width(2)));
    chart
        .draw_secondary_series(
            spec.values_per_s
                .iter()
                .map(|w| ErrorBar::new_vertical(w.x, w.min, w.median, w.max, orange.filled(), 10)),
        )
        .map_err(err)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(label_font)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// The lower panel: p50 and p99 latency (a log axis when they span decades), and the
/// light-load point if the sweep has one.
fn draw_latency_panel(
    area: &Area<'_>,
    spec: &PlotSpec<'_>,
    x_axis: &KeyedAxis,
) -> Result<(), String> {
    let green = RGBColor(44, 160, 44);
    let purple = RGBColor(148, 103, 189);
    let label_font = (FONT_FAMILY, 16);
    let desc_font = (FONT_FAMILY, 18);
    let mut lat_values: Vec<f64> = spec
        .latency_ms_p50
        .iter()
        .chain(&spec.latency_ms_p99)
        .flat_map(|w| [w.min, w.median, w.max])
        .collect();
    if let Some((w, _)) = &spec.low_load_latency_ms_p50 {
        lat_values.extend([w.min, w.median, w.max]);
    }
    let lat_axis = ValueAxis::for_values(&lat_values);
    let lat_desc = if lat_axis.log {
        "latency (ms, log scale)"
    } else {
        "latency (ms)"
    };
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Latency, propose to delivery (median of runs; whiskers: min and max)",
            (FONT_FAMILY, 20),
        )
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .right_y_label_area_size(90)
        .build_cartesian_2d(x_axis.clone(), lat_axis)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(spec.x_desc)
        .y_desc(lat_desc)
        .x_label_formatter(&|x| (spec.x_label)(*x))
        .y_label_formatter(&|y| short_number(*y))
        .label_style(label_font)
        .axis_desc_style(desc_font)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    for (series, color, name) in [
        (&spec.latency_ms_p50, green, "p50 latency"),
        (&spec.latency_ms_p99, purple, "p99 latency"),
    ] {
        chart
            .draw_series(LineSeries::new(
                series.iter().map(|w| (w.x, w.median)),
                color.stroke_width(3),
            ))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart
            .draw_series(
                series.iter().map(|w| {
                    ErrorBar::new_vertical(w.x, w.min, w.median, w.max, color.filled(), 10)
                }),
            )
            .map_err(err)?;
    }
    if let Some((w, name)) = &spec.low_load_latency_ms_p50 {
        let red = RGBColor(200, 30, 30);
        chart
            .draw_series(std::iter::once(TriangleMarker::new(
                (w.x, w.median),
                9,
                red.filled(),
            )))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| TriangleMarker::new((x + 12, y), 7, red.filled()));
        chart
            .draw_series(std::iter::once(ErrorBar::new_vertical(
                w.x,
                w.min,
                w.median,
                w.max,
                red.filled(),
                10,
            )))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(label_font)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_png_with_text() {
        let dir = std::env::temp_dir().join(format!("abcast-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plot.png");
        let w = |x: f64, m: f64| Whisker {
            x,
            min: m * 0.9,
            median: m,
            max: m * 1.1,
        };
        let label = |x: f64| format!("{}", 2f64.powf(x));
        let spec = PlotSpec {
            title: "test plot",
            x_desc: "x (unit)",
            x_keys: vec![4.0, 8.0],
            x_label: &label,
            mbit_per_s: vec![w(4.0, 10.0), w(8.0, 100.0)],
            values_per_s: vec![w(4.0, 1000.0), w(8.0, 500.0)],
            latency_ms_p50: vec![w(4.0, 1.0), w(8.0, 2.0)],
            latency_ms_p99: vec![w(4.0, 3.0), w(8.0, 6.0)],
            low_load_latency_ms_p50: Some((w(6.0, 0.5), "light load".to_string())),
        };
        draw(&path, &spec).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len > 10_000, "png of {len} bytes");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// One line of a [`LinePanel`].
#[derive(Debug, Clone)]
pub struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Draw a marker on every point (for sweeps with few points).
    pub markers: bool,
}

/// One chart of stacked line charts: plain x/y lines, for time series and small sweeps
/// (the Multi-Ring experiments).
#[derive(Debug, Clone)]
pub struct LinePanel {
    pub caption: String,
    pub x_desc: String,
    pub y_desc: String,
    pub lines: Vec<Line>,
}

pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 95, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(214, 39, 40),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Draws `panels` stacked vertically under `title` into a PNG at `path`.
pub fn draw_lines(path: &Path, title: &str, panels: &[LinePanel]) -> Result<(), String> {
    ensure_font()?;
    if panels.is_empty() {
        return Err("cannot draw the plot: no panel".to_string());
    }
    let root = BitMapBackend::new(path, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled(title, (FONT_FAMILY, 24).into_font().style(FontStyle::Bold))
        .map_err(err)?;
    let areas = root.split_evenly((panels.len(), 1));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        let finite = |v: &f64| v.is_finite();
        let xs = || {
            panel
                .lines
                .iter()
                .flat_map(|l| l.points.iter().map(|p| p.0))
        };
        let ys = || {
            panel
                .lines
                .iter()
                .flat_map(|l| l.points.iter().map(|p| p.1))
        };
        let x_lo = xs().filter(finite).fold(f64::INFINITY, f64::min);
        let x_hi = xs().filter(finite).fold(f64::NEG_INFINITY, f64::max);
        let y_hi = ys().filter(finite).fold(0.0, f64::max);
        let (x_lo, x_hi) = if x_lo.is_finite() && x_hi > x_lo {
            (x_lo, x_hi)
        } else if x_lo.is_finite() {
            (x_lo - 0.5, x_lo + 0.5)
        } else {
            (0.0, 1.0)
        };
        let y_hi = if y_hi > 0.0 { y_hi * 1.15 } else { 1.0 };
        let pad = (x_hi - x_lo) * 0.03;
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.caption, (FONT_FAMILY, 20))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d((x_lo - pad)..(x_hi + pad), 0.0..y_hi)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(panel.x_desc.as_str())
            .y_desc(panel.y_desc.as_str())
            .y_label_formatter(&|y| crate::format::group(y.max(0.0).round() as u64))
            .label_style((FONT_FAMILY, 16))
            .axis_desc_style((FONT_FAMILY, 18))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        for (i, line) in panel.lines.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let pts: Vec<(f64, f64)> = line
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(line.label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                });
            if line.markers {
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 5, color.filled())))
                    .map_err(err)?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FONT_FAMILY, 16))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
