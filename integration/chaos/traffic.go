package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	ominformers "github.com/trafficmap/publisher/api/client/informers/externalversions"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/integration/gatewaykit"
)

// The traffic rule (-gateways): a request sent through Traefik more than trafficGrace after
// a Published=True was observed, while that True stands, must not reach a cluster the True
// gives weight 0. Traefik's route settle (3 s by default, --route-settle auto) comes before
// the True, so the grace only covers the watch's delivery and one request's flight.
//
// The judge's watch can fall behind the API server for long (after an API server restart
// its informer re-lists on the reflector's backoff: a 30-minute run judged 310 requests
// against a True retracted 14 s before its watch said so). So a stretch is confirmed from
// the API server: every confirmEvery the judge reads each standing map and, while its live
// Published condition is still the stretch's True (status, reason, message, generation and
// transition time alike), moves the stretch's Confirmed mark to the read's start. Only a
// request sent before that mark is judged; the rest are counted as unconfirmed.
const (
	trafficGrace = 500 * time.Millisecond
	// requestEvery is each map's request loop period.
	requestEvery = 75 * time.Millisecond
	// confirmEvery is the period of the stretches' confirmation from the API server.
	confirmEvery = time.Second
)

// sentRequest is one request of a loop, as sent and answered.
type sentRequest struct {
	Sent   time.Time
	Host   string
	Who    string // the cluster that answered, "HTTP <code>", or "" on a transport error
	Status int
	Err    string
}

// standing is one stretch of Published=True of one map as the judge's watch saw it: from
// its observation until the condition changed (To zero: still standing). Claim is what the
// True says: the oracle's verdict over the inputs at its resourceVersion, or, for a True
// written while an input changed, over the inputs just before that change when the route
// it wrote holds those (Race).
type standing struct {
	From, To time.Time
	// Confirmed is the start of the last read of the API server that found this True
	// standing: the True stood throughout From..Confirmed (zero: never confirmed).
	Confirmed time.Time
	Map       *v1beta1.TrafficMap
	Claim     *verdict // nil until read
	Race      bool
	Err       error // the inputs could not be read: the stretch is not judged
}

// trafficLie is a request that reached a cluster the standing True gives weight 0.
type trafficLie struct {
	Map      string
	Request  sentRequest
	Standing standing
	Timeline string // the first lies' only (maxTimelines)
}

// maxTimelines bounds how many traffic lies get a timeline.
const maxTimelines = 10

// trafficResults are the traffic judge's figures.
type trafficResults struct {
	Maps     int
	Requests int
	Judged   int // sent while a True stood, past the grace, with the True's hostname
	// Unconfirmed are requests sent in a True stretch, past the grace and for its hostname,
	// after the last read that found the True still standing: not judged.
	Unconfirmed int
	Excluded    int // judged requests answered by a cluster of weight 0: the lies
	ServerErr   int // 5xx answers (all of them; Traefik answers 500 when every weight is 0)
	NotFound    int // 404 answers (no route for the host yet or any more)
	Failed      int // transport errors
	Trues       int // True stretches seen
	Races       int // Trues claiming the inputs before a change that landed during their write
	Unread      int // True stretches whose inputs could not be read (not judged)
	Lies        []trafficLie
}

// trafficJudge watches the Published condition of the maps of one namespace, records each
// True stretch with its claim (read through chk, the checker of that namespace), runs a
// request loop per map through Traefik and, at the end, judges every request against the
// stretch it was sent in. Safe for concurrent use.
type trafficJudge struct {
	chk    *checker
	ns     string
	addr   string // Traefik's entry point
	client *http.Client
	logf   func(string, ...any)

	cancel context.CancelFunc // ends the loops and the claim reader

	mu       sync.Mutex
	stands   map[string][]*standing // map key -> its True stretches, in order
	requests map[string][]sentRequest
	queue    chan *standing
	wg       sync.WaitGroup
}

func newTrafficJudge(chk *checker, ns, addr string, logf func(string, ...any)) *trafficJudge {
	return &trafficJudge{chk: chk, ns: ns, addr: addr, client: gatewaykit.ProxyClient(), logf: logf,
		stands: map[string][]*standing{}, requests: map[string][]sentRequest{}, queue: make(chan *standing, 10000)}
}

// Start watches the namespace's maps, reads the claims and runs a request loop for each of
// maps until ctx ends or Stop is called.
func (j *trafficJudge) Start(ctx context.Context, maps []mapRef) error {
	ctx, j.cancel = context.WithCancel(ctx)
	inf := ominformers.NewSharedInformerFactoryWithOptions(j.chk.cfg.OME, 0, ominformers.WithNamespace(j.ns)).Ome().V1beta1().TrafficMaps().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { j.observe(obj.(*v1beta1.TrafficMap), false) },
		UpdateFunc: func(_, obj any) { j.observe(obj.(*v1beta1.TrafficMap), false) },
		DeleteFunc: func(obj any) {
			if tm, ok := obj.(*v1beta1.TrafficMap); ok {
				j.observe(tm, true)
			}
		},
	})
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("traffic judge trafficmap cache for namespace %s: %w", j.ns, ctx.Err())
	}
	j.wg.Add(1)
	go func() { defer j.wg.Done(); j.readClaims(ctx) }()
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		wait.UntilWithContext(ctx, j.confirm, confirmEvery)
	}()
	for _, m := range maps {
		j.wg.Add(1)
		go func() { defer j.wg.Done(); j.loop(ctx, m) }()
	}
	return nil
}

// Stop ends the loops and the claim reader and waits for them, then confirms the standing
// stretches once more (so the last requests are judged); Results is final after it.
func (j *trafficJudge) Stop() {
	if j.cancel != nil {
		j.cancel()
	}
	j.wg.Wait()
	if j.chk != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		j.confirm(ctx)
	}
}

// confirm reads every map with a standing True from the API server and moves the stretch's
// Confirmed mark to the read's start while the live condition is still that True. A map
// that cannot be read keeps its mark (its later requests stay unconfirmed).
func (j *trafficJudge) confirm(ctx context.Context) {
	j.mu.Lock()
	open := map[string]*standing{}
	for key, ss := range j.stands {
		if n := len(ss); n > 0 && ss[n-1].To.IsZero() {
			open[key] = ss[n-1]
		}
	}
	j.mu.Unlock()
	for key, s := range open {
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		live, err := j.chk.cfg.OME.OmeV1beta1().TrafficMaps(s.Map.Namespace).Get(rctx, s.Map.Name, metav1.GetOptions{})
		cancel()
		if err != nil {
			continue
		}
		if sameTrue(s.Map, live) {
			j.mu.Lock()
			s.Confirmed = start
			j.mu.Unlock()
		} else {
			j.logf("traffic judge: %s: the watch's True is not the live condition any more", key)
		}
	}
}

// sameTrue: live's Published condition is the True that stood in seen, at seen's generation.
func sameTrue(seen, live *v1beta1.TrafficMap) bool {
	a := meta.FindStatusCondition(seen.Status.Conditions, v1beta1.ConditionPublished)
	b := meta.FindStatusCondition(live.Status.Conditions, v1beta1.ConditionPublished)
	return a != nil && b != nil && b.Status == metav1.ConditionTrue && live.Generation == seen.Generation &&
		a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.ObservedGeneration == b.ObservedGeneration && a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

// observe closes the map's standing True when the condition changed and opens a new one
// for a True at the map's generation.
func (j *trafficJudge) observe(tm *v1beta1.TrafficMap, deleted bool) {
	key := tm.Namespace + "/" + tm.Name
	now := time.Now()
	st, ok := published(tm)
	isTrue := !deleted && ok && st.Status == metav1.ConditionTrue && st.ObservedGeneration == tm.Generation
	j.mu.Lock()
	defer j.mu.Unlock()
	ss := j.stands[key]
	var cur *standing
	if n := len(ss); n > 0 && ss[n-1].To.IsZero() {
		cur = ss[n-1]
	}
	if cur != nil {
		if prev, _ := published(cur.Map); isTrue && prev == st && cur.Map.Generation == tm.Generation {
			return // the same True (another field of the map changed)
		}
		cur.To = now
	}
	if !isTrue {
		return
	}
	s := &standing{From: now, Map: tm.DeepCopy()}
	j.stands[key] = append(ss, s)
	select {
	case j.queue <- s:
	default:
		s.Err = fmt.Errorf("claim queue full")
	}
}

// readClaims reads each queued True's claim (retrying while the API server is faulted).
func (j *trafficJudge) readClaims(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-j.queue:
			var claim *verdict
			var race bool
			var err error
			for attempt := 0; attempt < 60 && ctx.Err() == nil; attempt++ {
				if claim, race, err = j.claim(ctx, s.Map); err == nil {
					break
				}
				sleep(ctx, time.Second)
			}
			j.mu.Lock()
			s.Claim, s.Race, s.Err = claim, race, err
			j.mu.Unlock()
		}
	}
}

// claim is the verdict a True of tm makes: expect over the inputs at its resourceVersion;
// when the route stored then holds other weights or another hostname and an input changed
// during the write (as checker.judge's races), the verdict over the inputs just before it
// when the route holds those.
func (j *trafficJudge) claim(ctx context.Context, tm *v1beta1.TrafficMap) (*verdict, bool, error) {
	st, err := j.chk.read(ctx, tm, tm.ResourceVersion)
	if err != nil {
		return nil, false, err
	}
	v := expect(st.in)
	changed := latestRV(st)
	if routeHolds(j.chk.judgeRoute(tm, st, v)) || changed <= 1 {
		return &v, false, nil
	}
	before, err := j.chk.read(ctx, tm, fmt.Sprint(changed-1))
	if err != nil {
		return nil, false, err
	}
	vb := expect(before.in)
	before.route, before.clusters = st.route, st.clusters
	if vb.TrueAllowed && routeHolds(j.chk.judgeRoute(tm, before, vb)) {
		return &vb, true, nil
	}
	return &v, false, nil
}

// routeHolds: judgeRoute found the route's weights and hostname as expected (the gateway's
// verdict aside).
func routeHolds(problems []string) bool {
	for _, p := range problems {
		if strings.HasPrefix(p, "route") {
			return false
		}
	}
	return true
}

// hostFor is the hostname the map's requests carry: its standing True's, else the one the
// host template gives.
func (j *trafficJudge) hostFor(m mapRef) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	ss := j.stands[m.Key()]
	for i := len(ss) - 1; i >= 0; i-- {
		if c := ss[i].Claim; c != nil && c.Hostname != "" {
			return c.Hostname
		}
	}
	return m.Service + "." + m.Namespace + ".example.com"
}

// loop sends one request for the map every requestEvery until ctx ends.
func (j *trafficJudge) loop(ctx context.Context, m mapRef) {
	wait.NonSlidingUntilWithContext(ctx, func(context.Context) {
		r := sentRequest{Sent: time.Now(), Host: j.hostFor(m)}
		a, err := gatewaykit.Ask(j.client, "http://"+j.addr+"/", r.Host)
		if err != nil {
			r.Err = err.Error()
		}
		r.Who, r.Status = a.Who, a.Status
		j.mu.Lock()
		j.requests[m.Key()] = append(j.requests[m.Key()], r)
		j.mu.Unlock()
	}, requestEvery)
}

// Results judges every request against the True stretch it was sent in.
func (j *trafficJudge) Results() trafficResults {
	j.mu.Lock()
	defer j.mu.Unlock()
	res := trafficResults{Maps: len(j.requests)}
	for _, ss := range j.stands {
		for _, s := range ss {
			res.Trues++
			if s.Race {
				res.Races++
			}
			if s.Claim == nil {
				res.Unread++
			}
		}
	}
	for key, reqs := range j.requests {
		for _, r := range reqs {
			res.Requests++
			switch {
			case r.Err != "":
				res.Failed++
			case r.Status >= 500:
				res.ServerErr++
			case r.Status == http.StatusNotFound:
				res.NotFound++
			}
			s := standingAt(j.stands[key], r.Sent)
			if s == nil || s.Claim == nil || !s.Claim.TrueAllowed || r.Host != s.Claim.Hostname {
				continue
			}
			if !r.Sent.Before(s.Confirmed) {
				res.Unconfirmed++
				continue
			}
			res.Judged++
			if w, known := s.Claim.Weights[r.Who]; r.Status == http.StatusOK && (!known || w == 0) {
				res.Excluded++
				res.Lies = append(res.Lies, trafficLie{Map: key, Request: r, Standing: *s})
			}
		}
	}
	slices.SortFunc(res.Lies, func(a, b trafficLie) int { return a.Request.Sent.Compare(b.Request.Sent) })
	for i := range res.Lies[:min(len(res.Lies), maxTimelines)] {
		res.Lies[i].Timeline = j.timeline(res.Lies[i])
	}
	return res
}

// standingAt is the True stretch standing at sent, observed more than trafficGrace before.
func standingAt(ss []*standing, sent time.Time) *standing {
	for _, s := range ss {
		if !sent.Before(s.From.Add(trafficGrace)) && (s.To.IsZero() || sent.Before(s.To)) {
			return s
		}
	}
	return nil
}

// timeline renders a traffic lie: the map's True stretches from 10 s before its stretch on,
// and its requests around the stretch's start and in the 2 s up to the lie. The caller
// holds mu.
func (j *trafficJudge) timeline(l trafficLie) string {
	var b strings.Builder
	for _, s := range j.stands[l.Map] {
		if s.To.IsZero() || s.To.After(l.Standing.From.Add(-10*time.Second)) {
			to := "standing"
			if !s.To.IsZero() {
				to = s.To.Format(timeLayout)
			}
			c, _ := published(s.Map)
			claim := "unread"
			if s.Claim != nil {
				claim = render(s.Claim.Weights) + " host " + s.Claim.Hostname
			}
			fmt.Fprintf(&b, "  True %s .. %s (confirmed to %s) rv %s gen %d claim %s race %v: %s\n", s.From.Format(timeLayout), to, s.Confirmed.Format(timeLayout), s.Map.ResourceVersion, s.Map.Generation, claim, s.Race, c.Message)
		}
	}
	for _, r := range j.requests[l.Map] {
		nearStart := r.Sent.After(l.Standing.From.Add(-3*time.Second)) && r.Sent.Before(l.Standing.From.Add(time.Second))
		if (nearStart || r.Sent.After(l.Request.Sent.Add(-2*time.Second))) && !r.Sent.After(l.Request.Sent) {
			fmt.Fprintf(&b, "  %s request host %s -> %s %s\n", r.Sent.Format(timeLayout), r.Host, r.Who, r.Err)
		}
	}
	return b.String()
}
