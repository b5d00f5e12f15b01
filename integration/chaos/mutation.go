package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/trafficmap/publisher/integration/mdsection"
	"github.com/trafficmap/publisher/internal/lieplant"
)

// plantHeading is the heading of the BENCHMARKS.md section a mutation run replaces; it
// goes right after the chaos run's.
const plantHeading = "## Planted lies"

// kindList names every lie -plant accepts.
func kindList() string {
	names := make([]string, 0, len(lieplant.Kinds()))
	for _, k := range lieplant.Kinds() {
		names = append(names, string(k))
	}
	return strings.Join(names, ", ")
}

// plantBuild is the build tags and the replicas' environment that plant the lie kind (none
// for ""); an unknown kind is an error.
func plantBuild(kind string) (tags, env []string, err error) {
	if kind == "" {
		return nil, nil, nil
	}
	if !slices.Contains(lieplant.Kinds(), lieplant.Kind(kind)) {
		return nil, nil, fmt.Errorf("-plant %q: want one of %s", kind, kindList())
	}
	return []string{"lieplant"}, []string{lieplant.EnvVar + "=" + kind}, nil
}

// planted is what one run with a planted lie found.
type planted struct {
	Kind  lieplant.Kind
	Lies  int
	Rules map[string]int // lies by checker rule
	Lost  int            // maps not correct at the end
	Err   error          // the run's error (a lie may keep maps from ever being correct)
	Wall  time.Duration
}

// caught: the checker called at least one Published=True a lie.
func (p planted) caught() bool { return p.Lies > 0 }

// scene is what one kind's planted run changes of the flags, so that the run holds what
// the lie needs before it can be told; the checker, its rules and its bounds stay as they
// are. Kinds without a scene run with the flags as given.
type scene struct {
	// faults keeps only the fault kinds it holds (nil: every kind).
	faults func(kind string) bool
	// ops keeps only the workload's operation kinds it holds (nil: every kind).
	ops func(kind string) bool
	// note says what the scene changes and why (a line under the table).
	note string
}

// scenes are the kinds whose lie the default schedule leaves to chance.
var scenes = map[lieplant.Kind]scene{
	// The lie is a True on a stored route the gateway has not accepted: it needs a
	// gateway that is slow or rejects while a route changes, for the stand-in gateway
	// accepts within milliseconds otherwise. With every kind in turn there is one of each
	// in 100 s, right after a kill that may change the leader (two lies in the runs of
	// 100 s so far, none in one of 45 s).
	lieplant.KindPrematureAccept: {
		faults: func(kind string) bool { return kind == faultGatewaySlow || kind == faultGatewayReject },
		note:   "only the gateway's faults (slow acceptance, a rejected route): a route the gateway has not accepted while the leader writes True",
	},
	// The lie is a True while one relevant client has not ACKed: it needs a client that
	// lags (frozen, or partitioned with its stream open) while a map it subscribes to
	// changes and the leader writes True. With every kind in turn there is one freeze and
	// one partition in 100 s, and both fall within the leader change of the process fault
	// before them (the new leader confirms none of the old leader's clients' new content
	// for --xds-peer-grace, so it writes no True the lag could lie about).
	lieplant.KindUnackedClient: {
		faults: func(kind string) bool { return kind == faultFreeze || kind == faultXDSPartition },
		note:   "only the client lags (an xds client frozen, or partitioned from its replica with its stream open): a client has not ACKed while the leader writes True",
	},
	// The lie is a True about the drains and taints the map had when it first went True,
	// told by the leader alone: the followers serve the live drains and taints, so where
	// those differ from the kept ones the leader never gathers the replicas' agreement and
	// says Publishing, not True. The lie that stands is a True on a malformed drain
	// annotation: every replica falls back to the drains recorded on the route, which are
	// the kept ones, while the inputs allow no True. It must stand past the retraction
	// bound, or see a True written meanwhile, and the default run gives it neither: "fix"
	// puts the annotation right within seconds, taints hold the maps Publishing, and each
	// fault that may change the leader lengthens the bound by 39 s.
	lieplant.KindIgnoredInput: {
		faults: func(kind string) bool { return !mayChangeLeader(kind) },
		ops:    func(kind string) bool { return !slices.Contains(ignoredInputHeld, kind) },
		note: "no fault that may change the leader (no kill, no API server outage, no replica partitioned from it) and no " +
			strings.Join(ignoredInputHeld, ", ") + " operations: a malformed drain annotation, which every replica reads as the " +
			"kept drains, stands until the settle while the followers serve the same content as the leader",
	},
}

// ignoredInputHeld are the workload's operations the ignored-input scene leaves out: the
// fix of a malformed annotation, and the taints the followers honour.
var ignoredInputHeld = []string{"fix", "taint", "untaint"}

// apply returns o with the scene's changes.
func (sc scene) apply(o options) options {
	if sc.faults != nil {
		o.faults = slices.DeleteFunc(slices.Clone(faultKinds), func(k string) bool { return !sc.faults(k) })
	}
	if sc.ops != nil {
		for _, op := range operations {
			if sc.ops(op.kind) {
				o.ops = append(o.ops, op.kind)
			}
		}
	}
	return o
}

// plantedRun is one short run of o with kind planted, in the kind's scene; a run that gets
// no result (the scene could not be set up) is an error.
func plantedRun(ctx context.Context, o options, kind lieplant.Kind, logf func(string, ...any)) (planted, error) {
	o = scenes[kind].apply(o)
	o.plant, o.duration = string(kind), o.plantDuration
	// A lie may keep maps from ever being correct: wait for them only briefly.
	o.warmTimeout, o.converge = time.Minute, plantConverge(o)
	if o.workDir != "" {
		o.workDir = filepath.Join(o.workDir, string(kind))
	}
	start := time.Now()
	res, err := run(ctx, o, func(format string, args ...any) { logf("["+string(kind)+"] "+format, args...) })
	if res == nil {
		return planted{}, fmt.Errorf("plant %s: %w", kind, err)
	}
	p := planted{Kind: kind, Lies: len(res.checks.Lies), Rules: map[string]int{}, Lost: len(res.lost), Err: err, Wall: time.Since(start)}
	for _, l := range res.checks.Lies {
		p.Rules[l.Rule]++
	}
	return p, nil
}

// plantConverge is how long a planted run waits for every map to be correct at the end.
func plantConverge(o options) time.Duration { return min(o.converge, 2*time.Minute) }

// mutate plants every lie in turn (only o.plant when set) and reports which the checker
// caught; it is an error unless every one was. Only a run of every kind writes the section.
func mutate(ctx context.Context, o options, logf func(string, ...any)) error {
	kinds := lieplant.Kinds()
	if o.plant != "" {
		if _, _, err := plantBuild(o.plant); err != nil {
			return err
		}
		kinds = []lieplant.Kind{lieplant.Kind(o.plant)}
	}
	var runs []planted
	for _, k := range kinds {
		p, err := plantedRun(ctx, o, k, logf)
		if err != nil {
			return err
		}
		logf("planted %s: %d lies caught %v (run error: %v)", k, p.Lies, p.Rules, p.Err)
		runs = append(runs, p)
	}
	table := plantTable(o, runs, repoCommit())
	fmt.Println(table)
	if o.out != "" && o.plant != "" {
		logf("a mutation run of one kind is printed only (the section holds every kind)")
	} else if o.out != "" {
		if err := writePlantSection(o.out, table); err != nil {
			return err
		}
	}
	if n := caughtOf(runs); n < len(runs) {
		return fmt.Errorf("the checker caught %d of %d planted lies (see the table)", n, len(runs))
	}
	return nil
}

func caughtOf(runs []planted) int {
	n := 0
	for _, p := range runs {
		if p.caught() {
			n++
		}
	}
	return n
}

// plantTable renders a mutation run as the body of the planted lies' section.
func plantTable(o options, runs []planted, commit string) string {
	var b strings.Builder
	b.WriteString(mdsection.Wrap(fmt.Sprintf("Each lie of internal/lieplant planted in turn in a publisher built with -tags lieplant, "+
		"one run of %s each (N = %d maps, seed %d). Written by `go run ./integration/chaos -mutation`: the next run replaces this section.",
		o.plantDuration, o.maps, o.seed), mdsection.LineWidth) + "\n")
	run := fmt.Sprintf("`make chaos-plant CHAOS_FLAGS=\"-n %d -dial %d -seed %d -fault-every %s -op-every %s -plant-duration %s%s\"`, finished %s at %s.",
		o.maps, o.dial, o.seed, o.faultEvery, o.opEvery, o.plantDuration, map[bool]string{true: " -round-robin"}[o.roundRobin],
		time.Now().UTC().Format("2006-01-02"), commit)
	b.WriteString(mdsection.Wrap(run, mdsection.LineWidth) + "\n")
	fmt.Fprintf(&b, "| Planted lie | Lies caught | Rules (lies) | Maps not correct %s after the last fault | Wall |\n| --- | --- | --- | --- | --- |\n", plantConverge(o))
	for _, p := range runs {
		var rules []string
		for _, r := range slices.Sorted(maps.Keys(p.Rules)) {
			rules = append(rules, fmt.Sprintf("%s (%d)", r, p.Rules[r]))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %s |\n", p.Kind, p.Lies, cmp.Or(strings.Join(rules, ", "), "-"), p.Lost, p.Wall.Round(time.Second))
	}
	var notes []string
	for _, p := range runs {
		if sc, ok := scenes[p.Kind]; ok {
			note := strings.TrimSuffix(mdsection.Wrap(fmt.Sprintf("- %s: %s.", p.Kind, sc.note), mdsection.LineWidth-2), "\n")
			notes = append(notes, strings.ReplaceAll(note, "\n", "\n  "))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n" + mdsection.Wrap("Scenes (what a kind's run changes of the flags above, so that its lie has something to lie about; the checker is the same):", mdsection.LineWidth))
		b.WriteString(strings.Join(notes, "\n") + "\n")
	}
	fmt.Fprintf(&b, "\nCaught %d of %d.\n", caughtOf(runs), len(runs))
	return b.String()
}

// writePlantSection replaces the planted lies' section of the markdown file at path
// (plantHeading), leaving every other section as it was; a missing one goes right after
// the chaos run's section (or before "## History", or at the end).
func writePlantSection(path, table string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	afterChaos := false
	text := mdsection.Replace(string(old), plantHeading, table, func(h string) bool {
		if h == chaosHeading {
			afterChaos = true
			return false
		}
		return afterChaos || h == "## History"
	})
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
