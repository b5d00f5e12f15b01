package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trafficmap/publisher/integration/mdsection"
)

// runMeta describes one run.
type runMeta struct {
	N, C, SotW int
	Mix        string // who the clients are
	MixName    string // -mix
	Cores      int
	Date, Go   string
	Commit     string // the publisher's source tree: its commit, and whether it had changes
	Phases     string // -phases
	Flags      string // the publisher's tuning flags
}

// row is one figure.
type row struct {
	figure, value, target string
	met                   bool
}

// report is one run's figures.
type report struct {
	meta runMeta
	rows []row
}

func (r *report) add(figure, value, target string, met bool) {
	r.rows = append(r.rows, row{figure, value, target, met})
}

// heading is the heading of the BENCHMARKS.md section a run of this N and mix replaces,
// e.g. "## Results: N = 1,000, realistic mix". Other documents link to it: keep it stable.
func (m runMeta) heading() string {
	return fmt.Sprintf("## Results: N = %s, %s mix", thousands(m.N), m.MixName)
}

// resultsHeading matches a results section's heading; see runMeta.heading.
var resultsHeading = regexp.MustCompile(`^## Results: N = ([0-9,]+), ([a-z]+) mix$`)

// resultsKey reads N and the mix back from a results heading; ok is false for any other.
func resultsKey(heading string) (n int, mix string, ok bool) {
	m := resultsHeading.FindStringSubmatch(heading)
	if m == nil {
		return 0, "", false
	}
	n, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	return n, m[2], err == nil
}

// goesBefore reports whether a section missing from the document, for this run's N and
// mix, goes right before the section with heading h: a results section of a larger N, or
// of the same N and a later mix, or the first section after the results (any other but
// the method and the contents).
func (m runMeta) goesBefore(h string) bool {
	if n, mix, ok := resultsKey(h); ok {
		return n > m.N || (n == m.N && mix > m.MixName)
	}
	return h != "## Method" && h != "## Contents"
}

// thousands formats n with a comma between each group of three digits: 10000 -> "10,000".
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// markdown is the body of the run's section (its heading apart): who the clients were,
// when, at which commit, on what, and one row per figure.
func (r *report) markdown() string {
	var sb strings.Builder
	m := r.meta
	sb.WriteString(mdsection.Wrap(fmt.Sprintf("N = %s maps x 8 clusters, C = %d xDS clients, %s.", thousands(m.N), m.C, m.Mix), mdsection.LineWidth))
	sb.WriteString(mdsection.Wrap(fmt.Sprintf("Measured %s at %s on %d cores, %s; phases %s. Publisher flags: `%s`.", m.Date, m.Commit, m.Cores, m.Go, m.Phases, m.Flags), mdsection.LineWidth))
	sb.WriteString("Written by `go run ./integration/bench`: the next run of this N and mix replaces this section.\n\n")
	sb.WriteString("| Figure | Measured | Target | Met |\n|---|---|---|---|\n")
	for _, x := range r.rows {
		met := ""
		if x.target != "" {
			met = "yes"
			if !x.met {
				met = "**no**"
			}
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s |\n", x.figure, x.value, x.target, met)
	}
	return sb.String()
}

// write replaces this run's section of the markdown file (its N and mix; see heading) and
// leaves every other section as it was; a missing section is added in N and mix order.
func (r *report) write(file string) error {
	old, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", file, err)
	}
	text := string(old)
	if text == "" {
		text = "# Benchmarks\n"
	}
	text = mdsection.Replace(text, r.meta.heading(), r.markdown(), r.meta.goesBefore)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// percentiles of a latency sample.
type percentiles struct{ p50, p95, p99 time.Duration }

func pct(d []time.Duration) percentiles {
	if len(d) == 0 {
		return percentiles{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return percentiles{at(0.50), at(0.95), at(0.99)}
}

func (p percentiles) String() string {
	return fmt.Sprintf("%s / %s / %s", dur(p.p50), dur(p.p95), dur(p.p99))
}

func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(max(b, time.Microsecond)) }

func mean(x []float64) float64 {
	var t float64
	for _, v := range x {
		t += v
	}
	return t / float64(max(len(x), 1))
}

func mib(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }
