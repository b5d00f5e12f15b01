package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// runMeta describes one run.
type runMeta struct {
	N, C, SotW int
	Mix        string // who the clients are
	MixName    string // -mix
	Cores      int
	Date, Go   string
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

func (r *report) markdown() string {
	var sb strings.Builder
	m := r.meta
	fmt.Fprintf(&sb, "### N = %d maps x 8 clusters, C = %d xDS clients, %s\n\n", m.N, m.C, m.Mix)
	fmt.Fprintf(&sb, "Measured %s on %d cores, %s. Publisher flags: `%s`.\n\n", m.Date, m.Cores, m.Go, m.Flags)
	sb.WriteString("| Figure | Measured | Target | Met | N | C | Cores | Date |\n|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.rows {
		met := ""
		if x.target != "" {
			met = "yes"
			if !x.met {
				met = "**no**"
			}
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %d | %d | %d | %s |\n", x.figure, x.value, x.target, met, m.N, m.C, m.Cores, m.Date)
	}
	return sb.String()
}

// write replaces this N's section of file (between its markers), or appends one.
func (r *report) write(file string) error {
	begin := fmt.Sprintf("<!-- bench n=%d mix=%s begin -->", r.meta.N, r.meta.MixName)
	end := fmt.Sprintf("<!-- bench n=%d mix=%s end -->", r.meta.N, r.meta.MixName)
	section := begin + "\n" + r.markdown() + end
	old, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	text := string(old)
	if i, j := strings.Index(text, begin), strings.Index(text, end); i >= 0 && j > i {
		text = text[:i] + section + text[j+len(end):]
	} else {
		if text == "" {
			text = "# Benchmarks\n"
		}
		text = strings.TrimRight(text, "\n") + "\n\n" + section + "\n"
	}
	return os.WriteFile(file, []byte(text), 0o644)
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
