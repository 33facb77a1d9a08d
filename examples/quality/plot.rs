//! SVG plots of precision and recall against k.

use std::path::Path;

/// One plot panel: its title and its named series (a value per k).
pub(crate) type Panel = (String, Vec<(String, Vec<f64>)>);

pub(crate) fn plot_grid(
    path: &Path,
    title: &str,
    panels: &[Panel],
    kmax: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let cols = 4usize;
    let rows = panels.len().div_ceil(cols);
    let root = SVGBackend::new(path, (1200, 40 + 260 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let areas = root.split_evenly((rows, cols));
    let colors = [BLUE, RED, GREEN, MAGENTA, BLACK, CYAN];
    for (area, (name, series)) in areas.iter().zip(panels) {
        let mut chart = ChartBuilder::on(area)
            .caption(name, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(36)
            .build_cartesian_2d(0u32..kmax, 0f64..1.02f64)?;
        chart
            .configure_mesh()
            .x_desc("k")
            .x_labels(kmax as usize / 2 + 1)
            .y_labels(6)
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for (s, (label, ys)) in series.iter().enumerate() {
            let color = colors[s % colors.len()];
            chart
                .draw_series(LineSeries::new(
                    ys.iter()
                        .enumerate()
                        .filter(|(_, y)| y.is_finite())
                        .map(|(k, &y)| (k as u32, y)),
                    color.stroke_width(2),
                ))?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

pub(crate) fn nan(x: Option<f64>) -> f64 {
    x.unwrap_or(f64::NAN)
}
