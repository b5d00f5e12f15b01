package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/trafficmap/publisher/integration/gatewaykit"
	"github.com/trafficmap/publisher/integration/mdsection"
	"github.com/trafficmap/publisher/integration/testenv"
)

// result is one run's findings.
type result struct {
	opts      options
	started   time.Time
	warm      time.Duration // start to every map published, before any fault
	lastFault time.Time
	converged time.Duration // last fault to every map correct
	lost      []string
	orphans   []string
	crashes   []string
	before    sample
	after     sample
	restarts  map[string]int
	checks    checkResults
	faults    []injection
	ops       map[string]int
	probes    map[string]probeStats
	refused   int64 // handshakes refused to the client without a certificate
	elapsed   time.Duration
	commit    string // the commit the publisher was built from (testenv.SourceCommit)
	judgedAt  time.Time
	// scene is the Traefik part (-gateways; nil: off), whose checker's findings are
	// traefikChecks and whose traffic judge's are traffic.
	scene         *traefikScene
	traefikChecks checkResults
	traffic       trafficResults
}

// repoCommit names the commit of this repository, which the publisher is built from.
func repoCommit() string {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "an unknown commit"
	}
	return testenv.SourceCommit(root)
}

// finish gathers what every part recorded.
func (r *result) finish(chk *checker, f *faults, w *workload, fleet *fleetProbes, replicas *replicaSet) *result {
	r.elapsed = time.Since(r.started)
	r.judgedAt = time.Now()
	r.checks = chk.Results(r.judgedAt)
	r.faults = f.Log()
	r.ops = w.Ops()
	r.crashes = replicas.Crashes()
	r.restarts = map[string]int{}
	for _, n := range replicas.Names() {
		r.restarts[n] = replicas.Restarts(n)
	}
	r.probes = map[string]probeStats{}
	for _, p := range append(append([]*probe{}, fleet.checked...), fleet.adversaries...) {
		r.probes[p.ID()] = p.Stats()
	}
	r.refused = fleet.anonymous.Stats().Refused
	if r.scene != nil {
		r.scene.judge.Stop()
		r.traffic = r.scene.judge.Results()
		r.traefikChecks = r.scene.chk.Results(r.judgedAt)
		r.crashes = append(r.crashes, r.scene.replicas.Crashes()...)
	}
	return r
}

// growth reports whether the stable replica grew beyond noise: goroutines by more than
// half plus 100, heap by more than double plus 64 MiB.
func (r *result) growth() string {
	if r.before.Goroutines == 0 || r.after.Goroutines == 0 {
		return "not sampled"
	}
	if r.after.Goroutines > r.before.Goroutines*3/2+100 {
		return fmt.Sprintf("goroutines %d -> %d", r.before.Goroutines, r.after.Goroutines)
	}
	if r.after.HeapBytes > 2*r.before.HeapBytes+64<<20 {
		return fmt.Sprintf("heap %d -> %d MiB", r.before.HeapBytes>>20, r.after.HeapBytes>>20)
	}
	return ""
}

// clean: no lie (traffic lies and the Traefik maps' included), no stuck map, nothing lost,
// no orphan, no crash, no growth, nothing left unchecked.
func (r *result) clean() bool {
	g := r.growth()
	t := r.traefikChecks
	if len(r.traffic.Lies) > 0 || len(t.Lies) > 0 || len(t.Judged.Stuck) > 0 || len(t.Unchecked) > 0 {
		return false
	}
	return len(r.checks.Lies) == 0 && len(r.checks.Judged.Stuck) == 0 && len(r.lost) == 0 && len(r.orphans) == 0 && len(r.crashes) == 0 &&
		len(r.checks.Unchecked) == 0 && (g == "" || g == "not sampled")
}

// faultReach is how long after its end a fault is still held responsible for a wait.
const faultReach = 5 * time.Second

// longestFalse is, per fault kind, how many were injected and the longest time to publish
// after the inputs stopped moving: of a Published=False window that only waited for sinks
// (falseWindow.waiting), the time from the map's last input change in it (or its start) to
// the True that ended it, attributed to every fault on at some moment of that interval or
// up to faultReach before it. A map whose inputs keep changing stays False by design; only
// the wait after the last change can be a fault's cost. "" collects the waits no fault
// overlaps, and "input" the longest whole window the workload's own inputs caused
// (contested hostnames, malformed annotations, ramps, deletions), whatever it overlaps.
func (r *result) longestFalse() (map[string]int, map[string]time.Duration) {
	count := map[string]int{}
	longest := map[string]time.Duration{}
	for _, in := range r.faults {
		count[in.Kind]++
	}
	for _, w := range r.checks.Windows {
		if !w.waiting() {
			longest["input"] = max(longest["input"], w.End.Sub(w.Start))
			continue
		}
		from := w.settled()
		d := w.End.Sub(from)
		hit := false
		for _, in := range r.faults {
			if in.Start.Before(w.End) && from.Before(in.End.Add(faultReach)) {
				hit = true
				longest[in.Kind] = max(longest[in.Kind], d)
			}
		}
		if !hit {
			longest[""] = max(longest[""], d)
		}
	}
	return count, longest
}

// markdown renders the run: whole for the run's output, brief for the chaos run's section
// of BENCHMARKS.md (see chaosHeading), which lists a lie on one line and at most 5 of each
// list, so the results document stays short.
func (r *result) markdown(brief bool) string {
	var b strings.Builder
	o := r.opts
	b.WriteString(mdsection.Wrap(fmt.Sprintf("N = %d maps, seed %d, %s of faults. Written by `go run ./integration/chaos`: "+
		"the next run replaces this section.", o.maps, o.seed, o.duration), mdsection.LineWidth) + "\n")
	run := fmt.Sprintf("`make chaos CHAOS_FLAGS=\"-n %d -duration %s -seed %d -fault-every %s -op-every %s -taint-every %s\"`", o.maps, o.duration, o.seed, o.faultEvery, o.opEvery, o.taintEvery)
	if o.race {
		run += " (publisher built with -race)"
	}
	if o.gateways != "" {
		run = strings.Replace(run, "`make chaos CHAOS_FLAGS=\"", fmt.Sprintf("`make chaos-gateways CHAOS_FLAGS=\"-traefik-maps %d ", o.traefikMaps), 1)
	}
	run += fmt.Sprintf(", finished %s at %s, wall %s.", time.Now().UTC().Format("2006-01-02"), r.commit, r.elapsed.Round(time.Second))
	b.WriteString(mdsection.Wrap(run, mdsection.LineWidth) + "\n")
	b.WriteString("| | |\n| --- | --- |\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("Published transitions seen", r.checks.Transitions)
	row("True transitions checked", fmt.Sprintf("%d of %d", r.checks.Checked, r.checks.Trues))
	row("**Lies**", fmt.Sprintf("**%d**", len(r.checks.Lies)))
	var slowest time.Duration
	for _, rc := range r.checks.Races {
		slowest = max(slowest, rc.Retracted)
	}
	row("True about the inputs just before a change that landed during its write (a race; retracted within 30 s, else a lie)",
		fmt.Sprintf("%d, retracted after at most %s", len(r.checks.Races), slowest.Round(time.Millisecond)))
	row("Unchecked (state at that resourceVersion unreadable)", len(r.checks.Unchecked))
	j := r.checks.Judged
	row("Continuous judgements (each map standing True, every 200 ms, against its inputs, route, gateway and every counted client)", j.Judgements)
	row("True not retracted (continuous: stood True past 30 s plus the outages while the data plane and the inputs disagreed; among the lies)", len(j.Lies))
	row("Time to retract (True while disagreeing, until Published left True or the data plane agreed)", percentiles(j.Retract))
	var stuckMax time.Duration
	for _, e := range j.Stuck {
		stuckMax = max(stuckMax, e.length(r.judgedAt))
	}
	row("Stuck (every part agreed, Published not True past 15 s plus the outages)", fmt.Sprintf("%d, longest %s", len(j.Stuck), stuckMax.Round(time.Millisecond)))
	skips := []string{fmt.Sprintf("%s (per-True check) %d", skipOlderGeneration, r.checks.OlderGen)}
	for _, k := range slices.Sorted(maps.Keys(r.checks.Skips)) {
		skips = append(skips, fmt.Sprintf("%s %d", k, r.checks.Skips[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(j.Skips)) {
		skips = append(skips, fmt.Sprintf("continuous: %s %d", k, j.Skips[k]))
	}
	row("Skips (judgements, or one client's part of one, not made)", strings.Join(skips, "; "))
	row("Maps lost (not correct at the end)", len(r.lost))
	row("Objects orphaned", len(r.orphans))
	row("Crashes (unexpected exits, panics, data races)", len(r.crashes))
	row("Replica restarts (a, b, c)", fmt.Sprintf("%d, %d, %d", r.restarts["a"], r.restarts["b"], r.restarts["c"]))
	row("Growth of the never-killed replica (goroutines, heap in use)", fmt.Sprintf("%d -> %d, %d -> %d MiB %s",
		r.before.Goroutines, r.after.Goroutines, r.before.HeapBytes>>20, r.after.HeapBytes>>20, r.growth()))
	row("Every map published before the faults", r.warm.Round(time.Second))
	row("Time to converge after the last fault (settle included)", r.converged.Round(time.Second))
	row("Workload operations", opsText(r.ops))
	if r.scene != nil {
		r.trafficRows(row)
	}
	b.WriteString("\n| Fault | Injected | Longest time to publish after the inputs stopped moving (Published=False waiting for sinks, from the map's last input change to True) while one was on (or up to 5 s before) |\n| --- | --- | --- |\n")
	count, longest := r.longestFalse()
	for _, k := range reportKinds(o.gateways != "") {
		fmt.Fprintf(&b, "| %s | %d | %s |\n", k, count[k], longest[k].Round(100*time.Millisecond))
	}
	fmt.Fprintf(&b, "| (none: workload only) | | %s |\n", longest[""].Round(100*time.Millisecond))
	fmt.Fprintf(&b, "| (the workload's own inputs, whole Published=False window: contested hostname, malformed annotation, ramp, deletion) | | %s |\n", longest["input"].Round(100*time.Millisecond))
	b.WriteString("\n" + mdsection.Wrap(fmt.Sprintf("Neighbours present throughout: a second namespace whose maps claim the chaos maps' hostnames, "+
		"a client of another namespace that subscribes to chaos maps and never ACKs, a client without a certificate (refused %d times), "+
		"and the NACKing client with a 2 KB node id and 6 KB NACK text.", r.refused), mdsection.LineWidth))
	var counts []string
	for _, id := range slices.Sorted(maps.Keys(r.probes)) {
		st := r.probes[id]
		counts = append(counts, fmt.Sprintf("%s %d/%d/%d/%d", id, st.Responses, st.ACKs, st.NACKs, st.Connects))
	}
	b.WriteString("\n" + mdsection.Wrap("xDS clients (responses/ACKs/NACKs/connects): "+strings.Join(counts, ", ")+".", mdsection.LineWidth))
	limit := 20 // items of a list
	if brief {
		limit = 5
	}
	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		if len(items) > limit {
			items = append(slices.Clone(items[:limit]), fmt.Sprintf("... and %d more", len(items)-limit))
		}
		fmt.Fprintf(&b, "\n%s:\n- %s\n", title, strings.Join(items, "\n- "))
	}
	if brief { // a row a lie, no timelines: the run's output has them
		var rows []string
		for _, l := range r.checks.Lies {
			rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s |", l.Map, l.At.Format(timeLayout), l.Rule, cutText(l.Detail, 300)))
		}
		for _, l := range r.traefikChecks.Lies {
			rows = append(rows, fmt.Sprintf("| %s (Traefik) | %s | %s | %s |", l.Map, l.At.Format(timeLayout), l.Rule, cutText(l.Detail, 300)))
		}
		for _, l := range r.traffic.Lies {
			rows = append(rows, fmt.Sprintf("| %s (traffic) | %s | traffic | a request reached %s, weight 0 in the True observed %s |", l.Map,
				l.Request.Sent.Format(timeLayout), l.Request.Who, l.Standing.From.Format(timeLayout)))
		}
		if len(rows) > 2*limit {
			rows = append(rows[:2*limit], fmt.Sprintf("| ... and %d more | | | |", len(rows)-2*limit))
		}
		if len(rows) > 0 {
			b.WriteString("\n| Lie (the run's output has its timeline) | At | Rule | Detail |\n| --- | --- | --- | --- |\n" + strings.Join(rows, "\n") + "\n")
		}
	} else {
		for _, l := range r.checks.Lies {
			fmt.Fprintf(&b, "\nLIE %s rv %s at %s: %s: %s\n```\n%s```\n", l.Map, l.RV, l.At.Format(timeLayout), l.Rule, l.Detail, l.Timeline)
		}
		for _, l := range r.traefikChecks.Lies {
			fmt.Fprintf(&b, "\nLIE (Traefik) %s rv %s at %s: %s: %s\n```\n%s```\n", l.Map, l.RV, l.At.Format(timeLayout), l.Rule, l.Detail, l.Timeline)
		}
		for _, l := range r.traffic.Lies[:min(len(r.traffic.Lies), maxTimelines)] {
			fmt.Fprintf(&b, "\nTRAFFIC LIE %s: request sent %s for %s reached %s, weight 0 in the True observed %s (rv %s)\n```\n%s```\n",
				l.Map, l.Request.Sent.Format(timeLayout), l.Request.Host, l.Request.Who, l.Standing.From.Format(timeLayout), l.Standing.Map.ResourceVersion, l.Timeline)
		}
	}
	list("Lost", r.lost)
	list("Orphans", r.orphans)
	list("Crashes", r.crashes)
	list("Unchecked", r.checks.Unchecked)
	list("Stuck", describe(r.checks.Judged.Stuck, r.judgedAt, len(r.checks.Judged.Stuck)))
	return b.String()
}

// cutText is s cut to at most n bytes at a rune boundary, ending in "…" when cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// chaosHeading is the heading of the BENCHMARKS.md section a run replaces. Other documents
// link to it: keep it stable.
const chaosHeading = "## Chaos run"

// writeSection replaces the chaos run's section of the markdown file at path (chaosHeading
// up to the next "## " heading) with table, leaving every other section as it was; a
// missing one is added before "## History", or at the end.
func writeSection(path, table string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	text := mdsection.Replace(string(old), chaosHeading, table, func(h string) bool { return h == "## History" })
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// trafficRows adds the Traefik part's rows (-gateways): its maps' checker findings and the
// traffic judge's counts.
func (r *result) trafficRows(row func(string, any)) {
	t, c := r.traffic, r.traefikChecks
	row(fmt.Sprintf("Traefik %s: maps, True transitions checked, lies, stuck", gatewaykit.TraefikVersion),
		fmt.Sprintf("%d, %d of %d, **%d**, %d", r.opts.traefikMaps, c.Checked, c.Trues, len(c.Lies), len(c.Judged.Stuck)))
	row("Traefik workload operations", opsText(r.scene.work.Ops()))
	row(fmt.Sprintf("Traffic through Traefik: requests (one per map every %s), judged (sent over %s after a True was seen, while it stood and before a read of the API server found it standing, for its hostname), unconfirmed (not judged: sent after the last such read)", requestEvery, trafficGrace),
		fmt.Sprintf("%d, %d, %d", t.Requests, t.Judged, t.Unconfirmed))
	row("**Traffic lies** (a judged request reached a cluster the standing True gives weight 0)", fmt.Sprintf("**%d**", t.Excluded))
	row("EndpointSlices following the DNS (a map standing True while its slices' ready addresses differed from the answer, until they agreed or Published left True)",
		percentiles(c.Judged.Slices))
	row("Traffic answers 5xx, 404, transport errors (not lies: all weights 0 answers 500, a new hostname 404 until routed)",
		fmt.Sprintf("%d, %d, %d", t.ServerErr, t.NotFound, t.Failed))
	row("True stretches seen by the traffic judge (races among them, inputs unreadable)", fmt.Sprintf("%d (%d, %d)", t.Trues, t.Races, t.Unread))
}

// opsText renders operation counts as "total (kind n, ...)".
func opsText(counts map[string]int) string {
	ops := make([]string, 0, len(counts))
	total := 0
	for k, v := range counts {
		ops = append(ops, fmt.Sprintf("%s %d", k, v))
		total += v
	}
	sort.Strings(ops)
	return fmt.Sprintf("%d (%s)", total, strings.Join(ops, ", "))
}
