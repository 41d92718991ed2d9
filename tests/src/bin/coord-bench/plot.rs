//! SVG plots of a comparison: the CDF of each subject's values.

use std::path::Path;

use plotters::prelude::*;

use crate::stats::Comparison;

/// Writes `<id>.svg` into `dir`: one step CDF per subject.
pub fn cdf(c: &Comparison, dir: &Path) -> Result<(), String> {
    let path = dir.join(format!("{}.svg", c.id));
    let all: Vec<f64> = c
        .coord
        .values
        .iter()
        .chain(&c.baseline.values)
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi.is_finite() {
        let pad = ((hi - lo) * 0.05).max(1e-9);
        (lo - pad, hi + pad)
    } else {
        (0.0, 1.0)
    };
    let root = SVGBackend::new(&path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(lo..hi, 0.0..1.0)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(c.unit)
        .y_desc("fraction of trials")
        .draw()
        .map_err(|e| e.to_string())?;
    for (series, color) in [(&c.coord, BLUE), (&c.baseline, RED)] {
        let mut v: Vec<f64> = series
            .values
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .collect();
        v.sort_by(f64::total_cmp);
        let n = v.len().max(1) as f64;
        let mut points = vec![(lo, 0.0)];
        for (i, x) in v.iter().enumerate() {
            points.push((*x, i as f64 / n));
            points.push((*x, (i + 1) as f64 / n));
        }
        points.push((hi, if v.is_empty() { 0.0 } else { 1.0 }));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(series.subject.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
