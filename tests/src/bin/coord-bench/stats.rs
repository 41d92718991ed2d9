//! Summaries of measured series, the comparison table, and its CSV.

use std::fmt::Write as _;
use std::path::Path;

/// One subject's measurements.
#[derive(Debug, Clone)]
pub struct Series {
    /// Who was measured ("coord", or the baseline's name).
    pub subject: String,
    /// One value per trial.
    pub values: Vec<f64>,
}

/// min, median, p99 and max of a series.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub min: f64,
    pub median: f64,
    pub p99: f64,
    pub max: f64,
}

/// The summary of `values`; `None` if empty.
pub fn summary(values: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        // Nearest rank.
        let rank = (q * v.len() as f64).ceil().max(1.0) as usize;
        v[rank.min(v.len()) - 1]
    };
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    Some(Summary {
        min: v[0],
        median,
        p99: at(0.99),
        max: v[v.len() - 1],
    })
}

/// coord against its baseline on one metric, measured in the same run.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// File-name stem (`detection-ttl3`).
    pub id: String,
    /// What is measured.
    pub title: String,
    /// Unit of the values.
    pub unit: &'static str,
    /// Whether lower is better (times, CPU) or higher (throughput).
    pub lower_is_better: bool,
    pub coord: Series,
    pub baseline: Series,
    /// A line printed under the table, if any.
    pub note: Option<String>,
    /// Which statistic the ratio compares.
    pub ratio_of: Statistic,
}

/// The statistic a comparison's ratio is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statistic {
    /// The medians (a typical trial).
    Median,
    /// The maxima (a peak load).
    Max,
}

impl Statistic {
    fn of(self, s: &Summary) -> f64 {
        match self {
            Statistic::Median => s.median,
            Statistic::Max => s.max,
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Statistic::Median => "medians",
            Statistic::Max => "maxima",
        }
    }
}

impl Comparison {
    /// coord's statistic over the baseline's (see `ratio_of`); `None` if
    /// either is empty or the baseline's is 0.
    pub fn ratio(&self) -> Option<f64> {
        let c = self.ratio_of.of(&summary(&self.coord.values)?);
        let b = self.ratio_of.of(&summary(&self.baseline.values)?);
        (b != 0.0).then(|| c / b)
    }

    /// True when both subjects have a measurement.
    pub fn measured(&self) -> bool {
        summary(&self.coord.values).is_some() && summary(&self.baseline.values).is_some()
    }

    /// The human table: a row per subject, then the ratio of medians.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} ({}, {} better)",
            self.title,
            self.unit,
            if self.lower_is_better {
                "lower"
            } else {
                "higher"
            }
        );
        let _ = writeln!(
            out,
            "  {:<28} {:>6} {:>10} {:>10} {:>10} {:>10}",
            "subject", "n", "min", "median", "p99", "max"
        );
        for s in [&self.coord, &self.baseline] {
            match summary(&s.values) {
                Some(m) => {
                    let _ = writeln!(
                        out,
                        "  {:<28} {:>6} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                        s.subject,
                        s.values.len(),
                        m.min,
                        m.median,
                        m.p99,
                        m.max
                    );
                }
                None => {
                    let _ = writeln!(out, "  {:<28} {:>6} (no measurement)", s.subject, 0);
                }
            }
        }
        match self.ratio() {
            Some(r) => {
                let _ = writeln!(
                    out,
                    "  ratio of {} (coord / {}): {r:.3}",
                    self.ratio_of.plural(),
                    self.baseline.subject
                );
            }
            None if self.measured() => {
                // Both measured, the baseline's statistic 0: as fast as
                // the measure can tell (a heal before etcd's return was
                // seen counts 0), no ratio to give.
                let _ = writeln!(
                    out,
                    "  ratio of {}: n/a (the baseline's is 0)",
                    self.ratio_of.plural()
                );
            }
            None => {
                let _ = writeln!(out, "  ratio of {}: n/a", self.ratio_of.plural());
            }
        }
        if let Some(note) = &self.note {
            let _ = writeln!(out, "  {note}");
        }
        out
    }

    /// Writes `<id>.csv` (subject, trial, value) into `dir`.
    pub fn write_csv(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::write(dir.join(format!("{}.csv", self.id)), self.csv())
    }

    /// The CSV text (RFC 4180: a subject such as "coord (adaptive,
    /// resume)" is quoted).
    fn csv(&self) -> String {
        let mut csv = format!(
            "subject,trial,value_{}\n",
            self.unit.replace(['/', ' '], "_")
        );
        for s in [&self.coord, &self.baseline] {
            let subject = csv_field(&s.subject);
            for (i, v) in s.values.iter().enumerate() {
                let _ = writeln!(csv, "{subject},{i},{v}");
            }
        }
        csv
    }
}

/// `field` as one CSV field: quoted, with its quotes doubled, if it holds
/// a comma, a quote or a line break.
fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_takes_nearest_ranks_and_the_middle() {
        let s = summary(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.p99, s.max), (1.0, 2.5, 4.0, 4.0));
        let s = summary(&(1..=200).map(f64::from).collect::<Vec<_>>()).unwrap();
        assert_eq!((s.median, s.p99), (100.5, 198.0));
        assert!(summary(&[]).is_none());
    }

    #[test]
    fn the_ratio_is_of_medians() {
        let c = Comparison {
            id: "x".into(),
            title: "x".into(),
            unit: "ms",
            lower_is_better: true,
            coord: Series {
                subject: "coord".into(),
                values: vec![1.0, 2.0, 30.0],
            },
            baseline: Series {
                subject: "base".into(),
                values: vec![4.0, 4.0, 1.0],
            },
            note: None,
            ratio_of: Statistic::Median,
        };
        assert_eq!(c.ratio(), Some(0.5));
        assert!(c.table().contains("ratio of medians (coord / base): 0.500"));
        let peaks = Comparison {
            ratio_of: Statistic::Max,
            ..c
        };
        assert_eq!(peaks.ratio(), Some(7.5));
        assert!(peaks
            .table()
            .contains("ratio of maxima (coord / base): 7.500"));
        // A baseline measured at 0: measured, but no ratio.
        let zero = Comparison {
            baseline: Series {
                subject: "base".into(),
                values: vec![0.0, 0.0, 5.0],
            },
            ratio_of: Statistic::Median,
            ..peaks
        };
        assert_eq!(zero.ratio(), None);
        assert!(zero.measured());
        assert!(zero.table().contains("n/a (the baseline's is 0)"));
        let empty = Comparison {
            baseline: Series {
                subject: "base".into(),
                values: vec![],
            },
            ..zero
        };
        assert!(!empty.measured());
    }

    #[test]
    fn csv_quotes_a_subject_with_a_comma_or_a_quote() {
        let c = Comparison {
            id: "x".into(),
            title: "x".into(),
            unit: "µs/event",
            lower_is_better: true,
            coord: Series {
                subject: "coord (adaptive, resume)".into(),
                values: vec![1.5],
            },
            baseline: Series {
                subject: "a \"raw\" loop".into(),
                values: vec![2.0],
            },
            note: None,
            ratio_of: Statistic::Median,
        };
        assert_eq!(
            c.csv(),
            "subject,trial,value_µs_event\n\
             \"coord (adaptive, resume)\",0,1.5\n\
             \"a \"\"raw\"\" loop\",0,2\n"
        );
    }
}
