package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trafficmap/publisher/api/v1beta1"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func noOutage(time.Time, time.Duration) time.Duration { return 0 }

// ticks feeds the tracker one look of map "chaos/a" per second from second 0: each
// character of states is one tick: T agree and True, L True and disagreeing, F not True and
// disagreeing, S not True and agreeing, D deleted (absent).
func ticks(tr *tracker, states string) {
	for i, c := range states {
		var looks []look
		switch c {
		case 'T':
			looks = []look{{Map: "chaos/a", True: true, Host: "a.example.com"}}
		case 'L':
			looks = []look{{Map: "chaos/a", True: true, Host: "a.example.com", Problems: []string{"route weights: differ"}}}
		case 'F':
			looks = []look{{Map: "chaos/a", Problems: []string{"inputs allow no True: Ramping"}}}
		case 'S':
			looks = []look{{Map: "chaos/a", Host: "a.example.com"}}
		}
		tr.step(at(float64(i)), looks)
	}
}

func TestTrackerEpisodes(t *testing.T) {
	long := func(c byte, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = c
		}
		return string(b)
	}
	cases := []struct {
		name                       string
		states                     string
		outage                     time.Duration
		lies, stuck, retracts      int
		how                        string // how the first True episode ended
		firstRetract, longestStuck time.Duration
	}{
		{name: "agreeing True is no episode", states: "TTTTT"},
		{name: "retracted within the bound", states: "TTLLLFF", retracts: 1, how: "retracted", firstRetract: 3 * time.Second},
		{name: "data plane agrees again within the bound", states: "TLLT", retracts: 1, how: "agreed", firstRetract: 2 * time.Second},
		{name: "True not retracted past the bound", states: "T" + long('L', 32) + "F", lies: 1, retracts: 1, how: "retracted", firstRetract: 32 * time.Second},
		{name: "an outage extends the bound", states: "T" + long('L', 32) + "F", outage: 5 * time.Second, retracts: 1, how: "retracted", firstRetract: 32 * time.Second},
		{name: "still open at the end counts to now", states: "T" + long('L', 40), lies: 1, retracts: 1, how: "open", firstRetract: 39 * time.Second},
		{name: "a deleted map ends its episode", states: "TLLD", retracts: 1, how: "deleted", firstRetract: 2 * time.Second},
		{name: "stuck within the bound is fine", states: long('S', 10) + "T"},
		{name: "stuck past the bound", states: long('S', 20) + "T", stuck: 1},
		{name: "stuck ends when the inputs change", states: long('S', 5) + long('F', 20)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker()
			ticks(tr, tc.states)
			now := at(float64(len(tc.states) - 1))
			j := tr.judge(now, func(time.Time, time.Duration) time.Duration { return tc.outage })
			assert.Len(t, j.Lies, tc.lies)
			assert.Len(t, j.Stuck, tc.stuck)
			require.Len(t, j.Retract, tc.retracts)
			if tc.retracts > 0 {
				assert.Equal(t, tc.firstRetract, j.Retract[0])
				var how string
				for _, e := range tr.episodes() {
					if e.Kind == episodeTrue {
						how = e.How
						break
					}
				}
				assert.Equal(t, tc.how, how)
			}
		})
	}
}

func TestTrackerCountsJudgementsAndSkips(t *testing.T) {
	tr := newTracker()
	tr.step(at(0), []look{{Map: "chaos/a", True: true, Skips: []string{skipNewClient}}, {Map: "chaos/b", Skips: []string{skipOlderGeneration}}})
	tr.step(at(1), []look{{Map: "chaos/a", True: true, Skips: []string{skipNewClient, skipDeparted}}})
	j := tr.judge(at(1), noOutage)
	assert.Equal(t, 2, j.Judgements)
	assert.Equal(t, map[string]int{skipNewClient: 2, skipDeparted: 1, skipOlderGeneration: 1}, j.Skips)
}

// Two maps True on one hostname: the later True is the rival and must be retracted; the
// holder is not blamed, and a map waiting for a name another True map holds is not stuck.
func TestTrackerRivalOnHeldName(t *testing.T) {
	tr := newTracker()
	holder := look{Map: "chaos/a", True: true, Host: "h.example.com"}
	tr.step(at(0), []look{holder, {Map: "rival/r", Host: "h.example.com"}})
	for s := 1; s <= 40; s++ {
		tr.step(at(float64(s)), []look{holder, {Map: "rival/r", True: true, Host: "h.example.com"}})
	}
	j := tr.judge(at(40), noOutage)
	require.Len(t, j.Lies, 1)
	assert.Equal(t, "rival/r", j.Lies[0].Map)
	assert.Contains(t, j.Lies[0].Detail, "rival True on a held name: chaos/a")
	assert.Empty(t, j.Stuck, "the rival was not True at first but the name was held: not stuck")

	tr = newTracker()
	for s := 0; s <= 40; s++ {
		tr.step(at(float64(s)), []look{holder, {Map: "rival/r", Host: "h.example.com"}})
	}
	j = tr.judge(at(40), noOutage)
	assert.Empty(t, j.Lies)
	assert.Empty(t, j.Stuck, "a map whose name another True map holds is not stuck")
}

func TestCountedClients(t *testing.T) {
	now := at(100)
	cases := []struct {
		name string
		st   probeStatus
		skip string
	}{
		{"never connected", probeStatus{}, skipNeverConnected},
		{"connected, never held the map", probeStatus{Connected: true, EverConnected: true, LinkAt: at(1)}, skipNewClient},
		{"connected and holding", probeStatus{Connected: true, EverConnected: true, LinkAt: at(1), EverHeld: true, Present: true}, ""},
		{"frozen or partitioned: still connected, counts", probeStatus{Connected: true, EverConnected: true, LinkAt: at(1), EverHeld: true}, ""},
		{"departed within the grace counts", probeStatus{EverConnected: true, LinkAt: now.Add(-departedGrace + time.Second), EverHeld: true, Present: true}, ""},
		{"departed past the grace", probeStatus{EverConnected: true, LinkAt: now.Add(-departedGrace - time.Second), EverHeld: true, Present: true}, skipDeparted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.skip, counted(tc.st, now))
		})
	}
}

func TestProbeStatus(t *testing.T) {
	p := newProbe(probeConfig{NodeID: "n", Maps: []mapRef{{Namespace: "chaos", Name: "a", Service: "a"}}})
	assert.Equal(t, probeStatus{}, p.Status("chaos/a", at(0)))
	p.links = []heldEvent{{At: at(1), Kind: eventConnected}, {At: at(5), Kind: eventDisconnected}}
	p.history["chaos/a"] = []heldEvent{{At: at(2), Kind: eventHeld, Weights: "w1=1", Present: true}, {At: at(3), Kind: eventHeld, Weights: "w1=2", Present: true}}
	assert.Equal(t, probeStatus{Connected: true, EverConnected: true, LinkAt: at(1)}, p.Status("chaos/a", at(1.5)))
	assert.Equal(t, probeStatus{Weights: "w1=1", Present: true, Connected: true, EverConnected: true, LinkAt: at(1), EverHeld: true}, p.Status("chaos/a", at(2.5)))
	assert.Equal(t, probeStatus{Weights: "w1=2", Present: true, EverConnected: true, LinkAt: at(5), EverHeld: true}, p.Status("chaos/a", at(6)),
		"a departed client keeps what it held")
}

// The checker's watch handler must not hold the checker's lock while it waits for room in
// a full queue: the checks that make room take that lock.
func TestObserveSendsOutsideTheLock(t *testing.T) {
	c := newChecker(checkerConfig{})
	c.queue = make(chan trueEvent, 1)
	c.queue <- trueEvent{}
	tm := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "chaos", Name: "a", Generation: 1, ResourceVersion: "7"},
		Status: v1beta1.TrafficMapStatus{Conditions: []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: metav1.ConditionTrue, ObservedGeneration: 1, Reason: "Published"}}}}
	sent := make(chan struct{})
	go func() {
		c.observe(tm, false) // blocks on the full queue
		close(sent)
	}()
	// With the lock held across the send, Results would block and this would time out.
	require.Eventually(t, func() bool { return c.Results(time.Now()).Trues == 1 }, 30*time.Second, 10*time.Millisecond,
		"the True is recorded and the checker's lock is free while the queue is full")
	<-c.queue
	<-sent
	assert.Equal(t, "7", (<-c.queue).Map.ResourceVersion)
}

// judgeXDS's window: a client must have held the weights at some moment from the True's
// lag before it up to the status write (managedFields, to the second), not up to when the
// watch showed the True.
func TestJudgeXDSWindow(t *testing.T) {
	written := at(10) // the status write, as managedFields records it
	seen := at(13)    // the watch event of the True
	tm := func(withTime bool) *v1beta1.TrafficMap {
		m := &v1beta1.TrafficMap{ObjectMeta: metav1.ObjectMeta{Namespace: "chaos", Name: "a"}}
		if withTime {
			m.ManagedFields = []metav1.ManagedFieldsEntry{
				{Manager: "trafficmap-publisher", Subresource: "status", Time: &metav1.Time{Time: written}},
				{Manager: "someone-else", Subresource: "status", Time: &metav1.Time{Time: at(12)}},
			}
		}
		return m
	}
	v := verdict{TrueAllowed: true, Weights: map[string]int32{"w1": 1, "w2": 0}}
	cases := []struct {
		name     string
		links    []heldEvent
		held     []heldEvent
		withTime bool
		lies     int
		skips    map[string]int
	}{
		{name: "held before the write", links: []heldEvent{{At: at(0), Kind: eventConnected}},
			held: []heldEvent{{At: at(9), Kind: eventHeld, Weights: "w1=1", Present: true}}, withTime: true, skips: map[string]int{}},
		{name: "took the weights on after the write, before the event: premature", links: []heldEvent{{At: at(0), Kind: eventConnected}},
			held:     []heldEvent{{At: at(5), Kind: eventHeld, Weights: "w1=1,w2=1", Present: true}, {At: at(12), Kind: eventHeld, Weights: "w1=1", Present: true}},
			withTime: true, lies: 1, skips: map[string]int{}},
		{name: "without a write time the window runs to the event", links: []heldEvent{{At: at(0), Kind: eventConnected}},
			held: []heldEvent{{At: at(12), Kind: eventHeld, Weights: "w1=1", Present: true}}, skips: map[string]int{skipNoWriteTime: 1}},
		{name: "never held them", links: []heldEvent{{At: at(0), Kind: eventConnected}},
			held: []heldEvent{{At: at(5), Kind: eventHeld, Weights: "w1=1,w2=1", Present: true}}, withTime: true, lies: 1, skips: map[string]int{}},
		{name: "reconnected within the window: a counted skip", links: []heldEvent{{At: at(0), Kind: eventConnected}, {At: at(10.2), Kind: eventDisconnected}, {At: at(10.5), Kind: eventConnected}},
			held: []heldEvent{{At: at(5), Kind: eventHeld, Weights: "w1=1,w2=1", Present: true}}, withTime: true, skips: map[string]int{skipReconnected: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newProbe(probeConfig{NodeID: "n", Envoy: true})
			p.links, p.history["chaos/a"] = tc.links, tc.held
			c := newChecker(checkerConfig{Probes: func() []*probe { return []*probe{p} },
				ProbeMaps: func(*probe, string) bool { return true }, Lag: func(time.Time) time.Duration { return 2 * time.Second }})
			problems := c.judgeXDS(tm(tc.withTime), seen, v)
			assert.Len(t, problems, tc.lies, "%v", problems)
			assert.Equal(t, tc.skips, c.Results(seen).Skips)
		})
	}
}

// An episode past its least bound is due for the freshness check once. Found current, it
// counts as it runs (a lie past its bound); found behind the API server, it is dropped, a
// counted skip, and the next disagreeing tick begins a new episode, due in its turn.
func TestTrackerFreshnessCheck(t *testing.T) {
	tr := newTracker()
	ticks(tr, strings.Repeat("L", 31)) // seconds 0..30: True while disagreeing
	assert.Empty(t, tr.due(at(30)), "not past retractWithin yet")
	due := tr.due(at(31))
	require.Len(t, due, 1)
	assert.Equal(t, checkKey{episodeTrue, "chaos/a", at(0)}, due[0])

	tr.drop(due[0]) // the caches were behind: the True had been retracted meanwhile
	assert.Equal(t, 1, tr.skips[skipCacheBehind])
	assert.Empty(t, tr.judge(at(31), noOutage).Lies, "a dropped episode is no lie")
	tr.step(at(31), []look{{Map: "chaos/a", True: true, Host: "a.example.com", Problems: []string{"route weights: differ"}}})
	assert.Empty(t, tr.due(at(40)), "the new episode began at 31")
	due = tr.due(at(62))
	require.Len(t, due, 1)
	assert.Equal(t, at(31), due[0].start)

	tr.checkedFresh(due[0]) // the caches were current: it stands
	assert.Empty(t, tr.due(at(63)), "checked once")
	lies := tr.judge(at(63), noOutage).Lies
	require.Len(t, lies, 1)
	assert.Equal(t, at(31), lies[0].Start)
	tr.step(at(64), []look{{Map: "chaos/a", True: true, Host: "a.example.com"}})
	assert.Empty(t, tr.checked, "an ended episode's check is forgotten")
}
