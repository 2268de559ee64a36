//! The report's charts, drawn with plotters as SVG text and inlined in report.html (so the
//! page stays one offline file): latency against load, latency CDFs on a log scale, box plots
//! (min, Q1, median, Q3, p99, max), histograms, CPU and memory per component class,
//! closed-loop throughput, memory against connections with its fitted line, and the capacity
//! model's latency-against-load curves with the objective and each knee. Each scenario keeps
//! one colour in every chart.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::analysis::{Analysis, Group, Point};

/// A drawn chart.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub svg: String,
}

const WIDTH: u32 = 900;
const FONT: &str = "sans-serif";
type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Every chart the analysis supports, in report order.
pub fn charts(analysis: &Analysis) -> Vec<Chart> {
    let palette = Palette::of(analysis);
    let mut out = capacity_curves(analysis, &palette);
    for placement in analysis.placements() {
        for pick in [Pick::P50, Pick::P99] {
            out.extend(latency_vs_load(analysis, &palette, placement, pick));
            out.extend(latency_vs_chain(analysis, &palette, placement, pick));
        }
    }
    out.extend(throughput(analysis, &palette));
    out.extend(memory_vs_connections(analysis, &palette));
    for point in analysis.points() {
        out.extend(cdf(analysis, &palette, point));
        out.extend(boxes(analysis, &palette, point));
    }
    for point in top_points(analysis) {
        out.extend(histogram(analysis, &palette, point));
        for measure in [Measure::Cpu, Measure::Memory] {
            out.extend(components(analysis, point, measure));
        }
    }
    out
}

/// The highest load point of each placement: where the differences are largest.
fn top_points<'a>(analysis: &'a Analysis) -> Vec<&'a Point> {
    analysis
        .placements()
        .into_iter()
        .filter_map(|placement| {
            analysis
                .points()
                .into_iter()
                .filter(|p| p.placement == placement)
                .max_by(|a, b| {
                    (a.load.rps, a.load.connections)
                        .partial_cmp(&(b.load.rps, b.load.connections))
                        .unwrap_or(std::cmp::Ordering::Equal)
                })
        })
        .collect()
}

/// The category10 palette: distinguishable, and familiar from matplotlib and d3.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

struct Palette(Vec<String>);

impl Palette {
    fn of(analysis: &Analysis) -> Self {
        Palette(analysis.scenarios().iter().map(|s| s.to_string()).collect())
    }

    fn color(&self, scenario: &str) -> RGBColor {
        let i = self.0.iter().position(|s| s == scenario).unwrap_or(0);
        COLORS[i % COLORS.len()]
    }
}

fn render(
    title: String,
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> DrawResult,
) -> Option<Chart> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        if let Err(e) = root
            .fill(&WHITE)
            .map_err(Into::into)
            .and_then(|()| draw(&root))
        {
            tracing::warn!(chart = %title, error = %e, "chart not drawn");
            return None;
        }
        if root.present().is_err() {
            return None;
        }
    }
    Some(Chart { title, svg })
}

#[derive(Clone, Copy)]
enum Pick {
    P50,
    P99,
}

impl Pick {
    fn name(self) -> &'static str {
        match self {
            Pick::P50 => "p50",
            Pick::P99 => "p99",
        }
    }

    /// The group's percentile in milliseconds.
    fn of(self, group: &Group) -> f64 {
        let quantile = match self {
            Pick::P50 => 0.5,
            Pick::P99 => 0.99,
        };
        group.latency.quantile(quantile).unwrap_or(0.0) / 1e3
    }
}

/// The groups of `placement` that `keep` selects.
fn groups_at<'g, 'c>(
    analysis: &'g Analysis<'c>,
    placement: &str,
    keep: impl Fn(&Group) -> bool,
) -> Vec<&'g Group<'c>> {
    let at = |g: &&Group| g.point.placement == placement && keep(g);
    analysis.groups.iter().filter(at).collect()
}

fn latency_vs_load(
    analysis: &Analysis,
    palette: &Palette,
    placement: &str,
    pick: Pick,
) -> Option<Chart> {
    let groups = groups_at(analysis, placement, |g| g.point.load.rps > 0.0);
    let axes = LatencyAxes {
        against: format!("requested rate ({})", or_all(placement)),
        x_desc: "requested rate (requests/s, log scale)",
        x: |g| g.point.load.rps,
    };
    latency_lines(analysis, palette, pick, axes, &groups)
}

/// E4's view: latency against the services a request crosses, one chart per number of
/// users.
fn latency_vs_chain(
    analysis: &Analysis,
    palette: &Palette,
    placement: &str,
    pick: Pick,
) -> Vec<Chart> {
    let chained = groups_at(analysis, placement, |g| g.point.load.services.is_some());
    let mut users: Vec<u32> = chained.iter().map(|g| g.point.load.connections).collect();
    users.sort_unstable();
    users.dedup();
    users
        .into_iter()
        .filter_map(|n| {
            let groups: Vec<&Group> = chained
                .iter()
                .copied()
                .filter(|g| g.point.load.connections == n)
                .collect();
            let axes = LatencyAxes {
                against: format!("services crossed ({n} users, {})", or_all(placement)),
                x_desc: "services one request crosses (log scale)",
                x: |g| f64::from(g.point.load.services.unwrap_or(1)),
            };
            latency_lines(analysis, palette, pick, axes, &groups)
        })
        .collect()
}

/// The x axis of a latency chart: what latency is plotted against.
struct LatencyAxes<'a> {
    against: String,
    x_desc: &'a str,
    x: fn(&Group) -> f64,
}

/// One line per scenario of a percentile against `axes.x` (log scale); none with fewer
/// than two x values.
fn latency_lines(
    analysis: &Analysis,
    palette: &Palette,
    pick: Pick,
    axes: LatencyAxes<'_>,
    groups: &[&Group],
) -> Option<Chart> {
    let mut xs: Vec<f64> = groups.iter().map(|g| (axes.x)(g)).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    if xs.len() < 2 {
        return None;
    }
    let value = |g: &Group| pick.of(g);
    // The axis spans the data, not zero to the top: a mesh adds a millisecond to a 200 ms
    // request, which an axis from zero would flatten into one line.
    let values: Vec<f64> = groups.iter().map(|g| value(g)).collect();
    let y_top = values.iter().copied().fold(0.0, f64::max);
    let y_bottom = values.iter().copied().fold(f64::INFINITY, f64::min);
    let pad = ((y_top - y_bottom) * 0.1).max(y_top * 0.005).max(0.001);
    let y_range = (y_bottom - pad).max(0.0)..y_top + pad;
    let (x_min, x_max) = (xs[0], xs[xs.len() - 1]);
    let title = format!("{} latency against {}", pick.name(), axes.against);
    render(title.clone(), 420, |root| {
        let mut chart = builder(root, &title, 18, 60)
            .build_cartesian_2d((x_min * 0.8..x_max * 1.2).log_scale(), y_range.clone())?;
        chart
            .configure_mesh()
            .x_desc(axes.x_desc)
            .x_labels(8)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_desc(format!(
                "{} latency (ms){}",
                pick.name(),
                if y_range.start > 0.0 {
                    ", axis not from 0"
                } else {
                    ""
                }
            ))
            .draw()?;
        for scenario in analysis.scenarios() {
            let mut line: Vec<(f64, f64)> = groups
                .iter()
                .filter(|g| g.scenario == scenario)
                .map(|g| ((axes.x)(g), value(g)))
                .collect();
            line.sort_by(|a, b| a.0.total_cmp(&b.0));
            let color = palette.color(scenario);
            chart
                .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?
                .label(scenario)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(line.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}

/// The capacity model: per (placement, connections), each search's p99 (the median of a
/// rate's tries) against the rate, both axes log-scaled, with the objective as a dashed line,
/// each knee as a ring and each capacity as a square.
fn capacity_curves(analysis: &Analysis, palette: &Palette) -> Vec<Chart> {
    let Some(slo) = analysis.slo_p99_ms else {
        return vec![];
    };
    let mut keys: Vec<(&str, u32)> = vec![];
    for s in &analysis.searches {
        if !keys.contains(&(s.placement.as_str(), s.connections)) {
            keys.push((s.placement.as_str(), s.connections));
        }
    }
    keys.into_iter()
        .filter_map(|(placement, connections)| {
            let searches: Vec<&crate::capacity::Search> = analysis
                .searches
                .iter()
                .filter(|s| s.placement == placement && s.connections == connections)
                .filter(|s| !s.curve.is_empty())
                .collect();
            let points = searches.iter().flat_map(|s| s.curve.iter());
            let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::INFINITY, 0.0_f64, slo, slo);
            for &(x, y) in points {
                x_min = x_min.min(x);
                x_max = x_max.max(x);
                if y > 0.0 {
                    y_min = y_min.min(y);
                    y_max = y_max.max(y);
                }
            }
            if searches.is_empty() || x_max <= 0.0 {
                return None;
            }
            let title = format!(
                "p99 against offered load, capacity search ({connections} connections, {})",
                or_all(placement)
            );
            render(title.clone(), 440, |root| {
                let mut chart = builder(root, &title, 18, 60).build_cartesian_2d(
                    (x_min * 0.8..x_max * 1.25).log_scale(),
                    (y_min * 0.8..y_max * 1.25).log_scale(),
                )?;
                chart
                    .configure_mesh()
                    .x_desc("requested rate (requests/s, log scale)")
                    .y_desc("p99 latency (ms, log scale; median of a rate's tries)")
                    .x_labels(8)
                    .x_label_formatter(&|v| format!("{v:.0}"))
                    .y_label_formatter(&|v| format!("{v:.2}"))
                    .draw()?;
                let objective = [(x_min * 0.8, slo), (x_max * 1.25, slo)];
                chart
                    .draw_series(DashedLineSeries::new(
                        objective,
                        6,
                        4,
                        BLACK.stroke_width(1),
                    ))?
                    .label(format!("objective: p99 {slo} ms"))
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
                for search in &searches {
                    let color = palette.color(&search.scenario);
                    let line: Vec<(f64, f64)> =
                        search.curve.iter().copied().filter(|p| p.1 > 0.0).collect();
                    let drawn =
                        chart.draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?;
                    // A scenario's repeated searches share its colour and its one legend entry.
                    if search.search == 1 {
                        drawn.label(search.scenario.clone()).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                        });
                    }
                    chart.draw_series(line.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
                    if let Some(knee) = search.knee.and_then(|i| search.curve.get(i)) {
                        chart.draw_series(std::iter::once(Circle::new(
                            *knee,
                            8,
                            color.stroke_width(2),
                        )))?;
                    }
                    if let Some(capacity) = search.capacity.meets_at {
                        if let Some(point) = search.curve.iter().find(|p| p.0 == capacity) {
                            chart.draw_series(std::iter::once(Rectangle::new(
                                [
                                    (point.0 * 0.97, point.1 * 0.93),
                                    (point.0 * 1.03, point.1 * 1.07),
                                ],
                                color.filled(),
                            )))?;
                        }
                    }
                }
                legend(&mut chart, SeriesLabelPosition::UpperLeft)
            })
        })
        .collect()
}

fn or_all(placement: &str) -> &str {
    if placement.is_empty() {
        "all cells"
    } else {
        placement
    }
}

fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .position(position)
        .label_font((FONT, 12))
        .draw()?;
    Ok(())
}

/// A chart with a caption and room for axis labels: `label_width` pixels for the categories
/// or values on the left.
fn builder<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    font_size: u32,
    label_width: u32,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, (FONT, font_size))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(label_width);
    builder
}

/// The groups at `point` that measured requests, with the smallest and largest latency (µs)
/// of any of them: the shared axis of the distribution charts.
fn with_latency<'g, 'a>(
    analysis: &'g Analysis<'a>,
    point: &Point,
) -> Option<(Vec<&'g Group<'a>>, f64, f64)> {
    let groups: Vec<&Group> = analysis
        .at(point)
        .filter(|g| !g.latency.is_empty())
        .collect();
    let lo = groups
        .iter()
        .filter_map(|g| g.latency.quantile(0.0))
        .reduce(f64::min)?;
    let hi = groups
        .iter()
        .filter_map(|g| g.latency.quantile(1.0))
        .fold(lo, f64::max);
    Some((groups, lo, hi))
}

/// Empirical CDF of every request's latency, log-scaled latency axis.
fn cdf(analysis: &Analysis, palette: &Palette, point: &Point) -> Option<Chart> {
    let (groups, lo, hi) = with_latency(analysis, point)?;
    let (lo, hi) = (lo / 1e3, hi / 1e3);
    let title = format!("Latency CDF, {}", point.label());
    render(title.clone(), 420, |root| {
        let mut chart = builder(root, &title, 18, 60)
            .build_cartesian_2d((lo.max(0.001) * 0.9..hi * 1.1).log_scale(), 0.0..1.0)?;
        chart
            .configure_mesh()
            .x_desc("latency (ms, log scale)")
            .y_desc("fraction of requests at or below")
            .draw()?;
        for g in &groups {
            let color = palette.color(&g.scenario);
            let points = g.latency.cdf().into_iter().map(|(us, f)| (us / 1e3, f));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(g.scenario.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    })
}

/// Horizontal box plots: box Q1-Q3 with the median, whiskers from min to p99, a dot at max
/// (E3's candlesticks, with the tail the studies care about made visible).
fn boxes(analysis: &Analysis, palette: &Palette, point: &Point) -> Option<Chart> {
    let (groups, lo, hi) = with_latency(analysis, point)?;
    let (lo, hi) = (lo / 1e3, hi / 1e3);
    let q = |g: &Group, p: f64| g.latency.quantile(p).unwrap_or(0.0) / 1e3;
    let n = groups.len();
    let names: Vec<String> = groups.iter().map(|g| g.scenario.clone()).collect();
    let title = format!(
        "Latency box plot (min, Q1, median, Q3, p99; dot: max), {}",
        point.label()
    );
    render(title.clone(), 120 + 40 * n as u32, |root| {
        let mut chart = builder(root, &title, 16, 300).build_cartesian_2d(
            (lo.max(0.001) * 0.9..hi * 1.1).log_scale(),
            -0.5..n as f64 - 0.5,
        )?;
        chart
            .configure_mesh()
            .x_desc("latency (ms, log scale)")
            .y_labels(n)
            .y_label_formatter(&|y| category(&names, *y))
            .disable_y_mesh()
            .draw()?;
        for (i, g) in groups.iter().enumerate() {
            let y = i as f64;
            let color = palette.color(&g.scenario);
            let (min, q1, median, q3, p99, max) = (
                q(g, 0.0),
                q(g, 0.25),
                q(g, 0.5),
                q(g, 0.75),
                q(g, 0.99),
                q(g, 1.0),
            );
            chart.draw_series([
                PathElement::new(vec![(min, y), (q1, y)], color.stroke_width(1)),
                PathElement::new(vec![(q3, y), (p99, y)], color.stroke_width(1)),
                PathElement::new(
                    vec![(min, y - 0.15), (min, y + 0.15)],
                    color.stroke_width(1),
                ),
                PathElement::new(
                    vec![(p99, y - 0.15), (p99, y + 0.15)],
                    color.stroke_width(1),
                ),
                PathElement::new(
                    vec![(median, y - 0.3), (median, y + 0.3)],
                    BLACK.stroke_width(2),
                ),
            ])?;
            chart.draw_series([Rectangle::new(
                [(q1, y - 0.3), (q3, y + 0.3)],
                color.mix(0.5).filled(),
            )])?;
            chart.draw_series([Circle::new((max, y), 3, color.filled())])?;
        }
        Ok(())
    })
}

/// The label of the category at (rounded) coordinate `at`.
fn category(names: &[String], at: f64) -> String {
    let i = at.round();
    if (at - i).abs() > 0.01 || i < 0.0 {
        return String::new();
    }
    names.get(i as usize).cloned().unwrap_or_default()
}

/// Share of requests per latency bin (log-spaced bins), one step line per scenario.
fn histogram(analysis: &Analysis, palette: &Palette, point: &Point) -> Option<Chart> {
    const BINS: usize = 40;
    let (groups, lo, hi) = with_latency(analysis, point)?;
    let lo = lo.max(1.0);
    let hi = hi.max(lo * 1.01);
    let (log_lo, log_hi) = (lo.ln(), hi.ln() + 1e-9);
    let bin_of = |us: f64| {
        (((us.max(lo).ln() - log_lo) / (log_hi - log_lo)) * BINS as f64).min(BINS as f64 - 1.0)
            as usize
    };
    let edge = |i: usize| (log_lo + (log_hi - log_lo) * i as f64 / BINS as f64).exp() / 1e3;
    let shares: Vec<(String, Vec<f64>)> = groups
        .iter()
        .map(|g| {
            let mut bins = vec![0.0; BINS];
            for &(us, count) in g.latency.points() {
                bins[bin_of(us)] += count as f64;
            }
            let total = g.latency.len() as f64;
            (
                g.scenario.clone(),
                bins.into_iter().map(|c| c / total).collect(),
            )
        })
        .collect();
    let y_max = shares
        .iter()
        .flat_map(|(_, b)| b.iter().copied())
        .fold(0.0, f64::max)
        * 1.1;
    let title = format!(
        "Latency histogram (share of requests per bin), {}",
        point.label()
    );
    render(title.clone(), 420, |root| {
        let mut chart = builder(root, &title, 18, 60)
            .build_cartesian_2d((edge(0)..edge(BINS)).log_scale(), 0.0..y_max.max(0.01))?;
        chart
            .configure_mesh()
            .x_desc("latency (ms, log-spaced bins)")
            .y_desc("share of requests")
            .draw()?;
        for (scenario, bins) in &shares {
            let color = palette.color(scenario);
            let steps: Vec<(f64, f64)> = bins
                .iter()
                .enumerate()
                .flat_map(|(i, &s)| [(edge(i), s), (edge(i + 1), s)])
                .collect();
            chart
                .draw_series(LineSeries::new(steps, color.stroke_width(2)))?
                .label(scenario.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

#[derive(Clone, Copy)]
enum Measure {
    Cpu,
    Memory,
}

/// Where a measured process belongs, as E1 and E4 split resources.
const CLASSES: [&str; 6] = [
    "load generator",
    "server app",
    "client proxy",
    "server proxy",
    "node agents",
    "control plane",
];

fn class_of(component: &str, role: &str) -> usize {
    match role {
        "load-generator" => 0,
        "app" => 1,
        "sidecar" if component.starts_with("load-generator") || component.starts_with("client") => {
            2
        }
        "sidecar" => 3,
        "node-agent" => 4,
        _ => 5,
    }
}

/// Stacked bars per scenario: CPU (cores, mean over the window) or memory (MiB, each
/// process's maximum), split into app, proxies, agents and control plane.
fn components(analysis: &Analysis, point: &Point, measure: Measure) -> Option<Chart> {
    let groups: Vec<&Group> = analysis.at(point).collect();
    if groups.is_empty() {
        return None;
    }
    let stacks: Vec<(String, [f64; 6])> = groups
        .iter()
        .map(|g| {
            let mut sums = [0.0; 6];
            for cell in &g.cells {
                for r in &cell.resources {
                    let v = match measure {
                        Measure::Cpu => r.cpu_cores_mean,
                        Measure::Memory => r.rss_mib_max,
                    };
                    sums[class_of(&r.component, &r.role)] += v / g.cells.len() as f64;
                }
            }
            (g.scenario.clone(), sums)
        })
        .collect();
    let x_max = stacks
        .iter()
        .map(|(_, s)| s.iter().sum::<f64>())
        .fold(0.0, f64::max)
        * 1.15;
    let n = stacks.len();
    let names: Vec<String> = stacks.iter().map(|(s, _)| s.clone()).collect();
    let (what, unit) = match measure {
        Measure::Cpu => ("CPU", "cores (mean over the measured window)"),
        Measure::Memory => ("Memory", "MiB (RSS, each process's maximum)"),
    };
    let title = format!("{what} by component, {}", point.label());
    // Grey for the load generator, then the scenario palette's first colours.
    let class_colors = [
        RGBColor(120, 120, 120),
        COLORS[0],
        COLORS[1],
        COLORS[3],
        COLORS[2],
        COLORS[4],
    ];
    render(title.clone(), 200 + 40 * n as u32, |root| {
        // The legend gets its own column so it never hides a bar.
        let (plot, key) = root.split_horizontally(WIDTH - 150);
        for (i, (class, color)) in CLASSES.iter().zip(class_colors).enumerate() {
            let y = 50 + 20 * i as i32;
            key.draw(&Rectangle::new([(6, y), (20, y + 10)], color.filled()))?;
            key.draw(&Text::new(*class, (26, y), (FONT, 12)))?;
        }
        let mut chart = builder(&plot, &title, 16, 300)
            .build_cartesian_2d(0.0..x_max.max(0.001), -0.5..n as f64 - 0.5)?;
        chart
            .configure_mesh()
            .x_desc(unit)
            .y_labels(n)
            .y_label_formatter(&|y| category(&names, *y))
            .disable_y_mesh()
            .draw()?;
        for (index, color) in class_colors.into_iter().enumerate() {
            let bars: Vec<Rectangle<(f64, f64)>> = stacks
                .iter()
                .enumerate()
                .map(|(i, (_, sums))| {
                    let start: f64 = sums[..index].iter().sum();
                    let y = i as f64;
                    Rectangle::new(
                        [(start, y - 0.3), (start + sums[index], y + 0.3)],
                        color.filled(),
                    )
                })
                .collect();
            chart.draw_series(bars)?;
        }
        Ok(())
    })
}

/// Closed-loop throughput per scenario (E1's decomposition), with the 95% interval across
/// repetitions and the share of the baseline's throughput.
fn throughput(analysis: &Analysis, palette: &Palette) -> Vec<Chart> {
    let mut out = vec![];
    // Sequential points are paced by their groups, not as fast as possible.
    let unpaced = |p: &&crate::analysis::Point| p.load.rps == 0.0 && p.load.group_size.is_none();
    for point in analysis.points().into_iter().filter(unpaced) {
        let groups: Vec<&Group> = analysis.at(point).collect();
        // The interval's own centre (the geometric mean) where there is one, so the bar sits
        // inside its line.
        let centre = |g: &Group| {
            g.achieved_rps
                .map_or_else(|| g.mean(|c| c.load.achieved_rps), |(i, _)| i.estimate)
        };
        let base = groups
            .iter()
            .find(|g| g.scenario == crate::cell::BASELINE)
            .map(|g| centre(g));
        // (label, centre, 95% interval across repetitions)
        type Bar = (String, f64, Option<(f64, f64)>);
        let bars: Vec<Bar> = groups
            .iter()
            .map(|g| {
                let mean = centre(g);
                let label = match base {
                    Some(b) if b > 0.0 => {
                        format!("{} ({:.0}% of baseline)", g.scenario, mean / b * 100.0)
                    }
                    _ => g.scenario.clone(),
                };
                (label, mean, g.achieved_rps.map(|(i, _)| (i.low, i.high)))
            })
            .collect();
        let n = bars.len();
        let x_max = bars
            .iter()
            .map(|(_, m, ci)| ci.map_or(*m, |c| c.1.max(*m)))
            .fold(0.0, f64::max)
            * 1.1;
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        let title = format!("Throughput, as fast as possible, {}", point.label());
        out.extend(render(title.clone(), 140 + 40 * n as u32, |root| {
            let mut chart = builder(root, &title, 16, 380)
                .build_cartesian_2d(0.0..x_max.max(1.0), -0.5..n as f64 - 0.5)?;
            chart
                .configure_mesh()
                .x_desc("achieved requests/s (bar: geometric mean of the repetitions; line: its 95% log-scale interval)")
                .y_labels(n)
                .y_label_formatter(&|y| category(&names, *y))
                .disable_y_mesh()
                .draw()?;
            for (i, (g, (_, mean, ci))) in groups.iter().zip(&bars).enumerate() {
                let y = i as f64;
                let color = palette.color(&g.scenario);
                chart.draw_series([Rectangle::new(
                    [(0.0, y - 0.3), (*mean, y + 0.3)],
                    color.filled(),
                )])?;
                if let Some((low, high)) = ci {
                    chart.draw_series([PathElement::new(
                        vec![(*low, y), (*high, y)],
                        BLACK.stroke_width(2),
                    )])?;
                }
            }
            Ok(())
        }));
    }
    out
}

/// E1's scatter of mesh memory against connections, with each scenario's fitted line.
fn memory_vs_connections(analysis: &Analysis, palette: &Palette) -> Option<Chart> {
    if analysis.fits.is_empty() {
        return None;
    }
    let x_max = analysis
        .fits
        .iter()
        .flat_map(|f| f.points.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        * 1.1;
    let y_max = analysis
        .fits
        .iter()
        .flat_map(|f| f.points.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        * 1.2;
    let title = "Mesh memory (sidecars, agents, control plane) against open connections".to_owned();
    render(title.clone(), 460, |root| {
        let mut chart =
            builder(root, &title, 16, 60).build_cartesian_2d(0.0..x_max, 0.0..y_max.max(1.0))?;
        chart
            .configure_mesh()
            .x_desc("open connections")
            .y_desc("memory (MiB, sum of each process's maximum RSS)")
            .draw()?;
        for fit in &analysis.fits {
            let color = palette.color(&fit.scenario);
            chart.draw_series(
                fit.points
                    .iter()
                    .map(|&p| Circle::new(p, 4, color.filled())),
            )?;
            let line = [(0.0, fit.fit.at(0.0)), (x_max, fit.fit.at(x_max))];
            let label = format!(
                "{} {}: {:.2} MiB/1000 conns, R^2 {:.3}",
                fit.scenario,
                fit.placement,
                fit.fit.slope * 1000.0,
                fit.fit.r_squared
            );
            chart
                .draw_series(LineSeries::new(line, color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}
