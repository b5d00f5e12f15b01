package publish

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/internal/lieplant"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// The pipeline, one map at a time, read top-down (reconcile, on the leader):
//
//	gather (gather.go)  the map's inputs from the caches
//	plan   (plan.go)    effective weights and the sink-neutral plan; pure; made once
//	sinks  (sinkFloor)  check: every enabled sink says whether it can carry the plan; pure.
//	                    A plan one sink refuses goes to no sink (each keeps its last good).
//	                    claim: names no one holds are granted (claim table) and written into
//	                    the map's claim journal (journal.go), before any sink serves them.
//	                    announce: Published False before any sink moves. apply: the same
//	                    plan to every enabled sink, with the map's model.Standing; each
//	                    answers with a typed confirmation. record (recorded.go): with the
//	                    HTTPRoute sink off, the last valid drains, taints and tolerations
//	decide (model)      the Published condition from the confirmations (model.Decide), and
//	                    with it PublicationFallback (model.Fallback); pure
//	status (status.go)  the status, only when it differs, with the claim journal pruned of
//	                    names the map no longer claims (the sinks no longer serve them)
//
// A map being deleted that the finalizer holds for this publisher walks teardown.go instead
// (after load): Finalizing, the zero plan to every sink, the removal, the finalizer.
//
// A replica that does not lead runs the first floors only (serve): gather, plan, check,
// then the plan to the sinks that serve on every replica (model.Serving); the same runs
// for every cached map before the sinks start. Data flows one way: no sink plans or calls
// back into the pipeline; what a sink learns later (an ACK) it names to the workers
// (model.Updater), which queue the map.

// The reasons of the Published condition are model.Reason constants (model/reason.go).

// mapInputs is where the pipeline reads a map and its inputs (the informer caches).
type mapInputs interface {
	trafficMap(namespace, name string) (*v1beta1.TrafficMap, error)
	gather(tm *v1beta1.TrafficMap) (model.Gathered, error)
	// sourceVersion is the live resourceVersion of the InferenceService namespace/name,
	// read from the API server ("" when it does not exist).
	sourceVersion(ctx context.Context, namespace, name string) (string, error)
	// staleClusters compares the cluster taints a decision about tm used with the taint
	// sources on the API server, read after the call began: "" when they agree, else the
	// first difference (taintsources.go).
	staleClusters(ctx context.Context, tm *v1beta1.TrafficMap, used []model.ClusterTaints) (string, error)
	// evidence is what tm's claim journal counts for with this publisher (caches.evidence).
	evidence(tm *v1beta1.TrafficMap) model.Evidence
	// writeRamps stores value as the InferenceService's weights.RampAnnotation ("" removes
	// it), guarded by its resourceVersion (a conflict error when it moved on).
	writeRamps(ctx context.Context, namespace, name, resourceVersion, value string) error
}

// reconciler runs the pipeline for one key. It keeps no per-map state of its own; the
// status writer's and the sinks' per-map state is dropped when the map is deleted.
type reconciler struct {
	inputs  mapInputs
	hosts   hostnamer
	sinks   []model.Sink
	status  *statusWriter
	metrics *metrics
	// record keeps the fallback state when no sink records it (the HTTPRoute sink is off);
	// nil otherwise.
	record *recordStore
	// claims is the claim table; publisher and digest are the claim journal's
	// publisherName and observedOptionsDigest.
	claims            *claimTable
	publisher, digest string
	// takeOverFrom is Config.TakeOverFrom: the publisher whose maps this one takes over;
	// known are Config.KnownPublishers; holders reports each map's holder change once
	// (holders.go), ignored each map's ignored journal entries once.
	takeOverFrom string
	known        []string
	holders      *holderLog
	ignored      *holderLog
	// watches reports whether the publisher watches a namespace (its --namespace list; nil:
	// every one): a key elsewhere belongs to another deployment and is never reconciled.
	watches func(namespace string) bool
	// grants are the claim records (claims.go), written before a name is journaled; nil
	// writes none (unit tests whose inputs trust the journal).
	grants *claimRecords
	// claimPolicy is Config's claim policy (model.ClaimPolicy).
	claimPolicy model.ClaimPolicy
	// planner plans a map from its model.Gathered inputs; nil is planMap with hosts (tests count
	// its calls).
	planner func(g model.Gathered) (*model.Planned, error)
	// teardowns times the waits of the maps being torn down (teardown.go).
	teardowns *teardownClock
	// lagging reports that the caches may lag the API server (a list or watch failed
	// within watchFailureWindow, as around an API server restart); then a map's first True
	// is checked against the live inputs too (fresh). nil: never.
	lagging func() bool
}

// plan is the pipeline's plan floor: the map's plan from its model.Gathered inputs.
func (r *reconciler) plan(g model.Gathered) (*model.Planned, error) {
	if r.planner != nil {
		return r.planner(g)
	}
	return planMap(r.hosts, g)
}

// keepInputs is lieplant.KindIgnoredInput: from the first hold (the map is True) on, the
// drain annotation and the taints the map was planned with before are used instead of g's.
func keepInputs(key string, g *model.Gathered, hold bool) {
	type drain struct {
		value string
		set   bool
	}
	g.Inputs.Clusters = lieplant.Keep(key+" taints", g.Inputs.Clusters, hold)
	now, set := g.Inputs.SourceAnnotations[weights.DrainAnnotation]
	kept := lieplant.Keep(key+" drain", drain{now, set}, hold)
	g.Inputs.SourceAnnotations = maps.Clone(g.Inputs.SourceAnnotations)
	delete(g.Inputs.SourceAnnotations, weights.DrainAnnotation)
	if kept.set {
		if g.Inputs.SourceAnnotations == nil {
			g.Inputs.SourceAnnotations = map[string]string{}
		}
		g.Inputs.SourceAnnotations[weights.DrainAnnotation] = kept.value
	}
}

// reconcile converges one TrafficMap. It returns an error only for transient failures,
// which the caller retries with backoff; user errors end in the Published condition. A
// positive hold asks the caller to reconcile the map again after it.
//
// It walks down the floors once: load and gather (the caches), plan, sinks (check, claim,
// announce, apply, record), decide, status (and ramps), each floor handing its result to
// the next.
func (r *reconciler) reconcile(ctx context.Context, key cache.ObjectName, log *zap.Logger) (time.Duration, error) {
	tm, deleted, err := r.load(ctx, key)
	if deleted {
		return 0, r.delete(ctx, key, log)
	}
	if err != nil || tm == nil {
		return 0, err
	}
	if tm.DeletionTimestamp != nil { // held by the finalizer
		if model.TornDownByOther(tm, keeper(r).publishers()) {
			// serve the map's xDS at weight 0, as the holder does; write and remove nothing
			zero, err := r.zeroPlan(tm)
			return 0, serveZeros(zero, err, r.sinks, servingOf(r.sinks))
		}
		return r.teardown(ctx, key, tm, log)
	}
	if h := model.HolderOf(tm, keeper(r).publishers()); h.Held() {
		return r.held(ctx, key, tm, h, log) // holders.go
	}
	r.holders.changed(types.NamespacedName(key), "")
	g, err := r.inputs.gather(tm)
	var ue *model.UserError
	if errors.As(err, &ue) {
		return r.status.fail(ctx, tm, ue, log)
	}
	if err != nil {
		return 0, err
	}
	keeper(r).reportIgnored(tm, g.Evidence.Ignored, log)
	if cleaned, wrote, err := keeper(r).dropIgnored(ctx, tm, g.Evidence, log); err != nil || wrote {
		if err != nil {
			return 0, err
		}
		tm, g.Inputs.TrafficMap = cleaned, cleaned
		g.Evidence = r.inputs.evidence(cleaned)
	}
	if lieplant.On && lieplant.Is(lieplant.KindIgnoredInput) {
		keepInputs(key.String(), &g, model.PublishedTrue(tm))
	}
	pl, err := r.plan(g)
	if errors.As(err, &ue) {
		return r.status.fail(ctx, tm, ue, log)
	}
	if err != nil {
		return 0, err
	}
	res, err := r.sinkFloor(ctx, key, tm, g, pl, log)
	switch {
	case errors.As(err, &ue):
		return r.status.fail(ctx, res.tm, ue, log)
	case err != nil:
		return 0, err
	case res.refused != nil: // no sink was handed the plan
		_, hold, err := r.status.write(ctx, tm, model.Decide(tm, pl, []model.Confirmation{*res.refused}), log)
		return hold, err
	}
	return r.decideAndWrite(ctx, key, res, g, log)
}

// load reads the map from the cache, or from the API server when the cache has not seen the
// publisher's own last write (whether to announce and what was published before are then
// decided from the live map). deleted is true for a map the cache no longer has, or that
// is terminating without the finalizer holding it for this publisher (a terminating map
// the finalizer holds is returned, for the teardown); a nil map without deleted means
// there is nothing to do (the live map is gone: the informer's delete event follows).
func (r *reconciler) load(ctx context.Context, key cache.ObjectName) (_ *v1beta1.TrafficMap, deleted bool, _ error) {
	if r.watches != nil && !r.watches(key.Namespace) {
		// Another deployment's map (a claim record of theirs in a shared claim namespace
		// names it): absent from this cache, it must not look deleted here, or its
		// teardown would delete their claim record.
		return nil, false, nil
	}
	tm, err := r.inputs.trafficMap(key.Namespace, key.Name)
	if err != nil {
		return nil, false, err
	}
	if tm == nil || tm.DeletionTimestamp != nil && !model.Finalizing(tm, keeper(r).publishers()) && !model.TornDownByOther(tm, keeper(r).publishers()) {
		return nil, true, nil
	}
	if !r.status.behind(tm) {
		return tm, false, nil
	}
	live, err := r.status.api.Get(ctx, key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read trafficmap %s newer than the cache: %w", key, err)
	}
	if live.DeletionTimestamp != nil && !model.Finalizing(live, keeper(r).publishers()) && !model.TornDownByOther(live, keeper(r).publishers()) {
		return nil, true, nil
	}
	return live, false, nil
}

// applied is what the sinks floor hands the decide floor: the map as stored (after a claim
// journal write), its plan, the sinks' confirmations, and whether a name is being granted to
// another map (look again soon); refused is the first refusal when a sink refuses the plan
// (then no sink was handed it).
type applied struct {
	tm        *v1beta1.TrafficMap
	pl        *model.Planned
	confs     []model.Confirmation
	tableHeld bool
	refused   *model.Confirmation
	// confirmed: the map's True condition was already about this content (Standing.Confirmed).
	confirmed bool
}

// sinkFloor checks the plan with every enabled sink (a plan one refuses goes to none),
// journals the names newly granted, announces a change (Published False before any sink
// moves), hands the plan to every enabled sink with the map's standing, and records the last
// valid state when no sink records it.
func (r *reconciler) sinkFloor(ctx context.Context, key cache.ObjectName, tm *v1beta1.TrafficMap, g model.Gathered, pl *model.Planned, log *zap.Logger) (applied, error) {
	res := applied{tm: tm, pl: pl}
	if res.refused = refusal(r.sinks, &pl.Plan); res.refused != nil {
		return res, nil
	}
	var err error
	if model.NeedsFinalizer(tm) { // before the first external write: the journal, an announce, a sink
		if tm, err = addFinalizer(ctx, r.status, tm, log); err != nil {
			return res, err
		}
		res.tm = tm
	}
	if len(pl.Claimable) > 0 || model.HolderOf(tm, keeper(r).publishers()).Replaces() {
		if res.tm, res.pl, res.tableHeld, err = r.claim(ctx, tm, g, pl, log); err != nil {
			return res, err
		}
		tm, pl = res.tm, res.pl
	}
	st, carried, err := r.standing(tm, pl)
	if err != nil {
		return res, err
	}
	switch {
	case model.NeedsAnnounce(tm, carried):
		if tm, _, err = r.status.write(ctx, tm, model.NotPublished(tm, model.ReasonPublishing, "publishing weights "+model.DescribeWeights(pl.Plan.Result), nil), log); err != nil {
			return res, err
		}
		res.tm = tm
	case !carried:
		r.metrics.started(key) // no condition yet: the latency clock starts without a write
	}
	st.Published = model.PublishedTrue(tm)
	res.confirmed = st.Confirmed
	res.confs = make([]model.Confirmation, 0, len(r.sinks))
	var errs []error
	for _, s := range r.sinks {
		// Every sink is handed the plan even when another failed transiently (an API
		// outage stalls no other sink); the reconcile is then retried.
		c, err := s.Apply(ctx, &pl.Plan, st)
		r.metrics.routeWritten(c.Writes)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s sink: %w", s.Name(), err))
			continue
		}
		if c.Writes > 0 {
			log.Info("sink wrote", zap.String("sink", s.Name()), zap.Int("writes", c.Writes), zap.String("weights", model.DescribeWeights(pl.Plan.Result)))
		}
		if c.State == model.InPlace {
			r.metrics.sinkConfirmed(key, s.Name())
		}
		res.confs = append(res.confs, c)
	}
	if len(errs) > 0 {
		return res, errors.Join(errs...)
	}
	// record: every enabled sink took the plan without error, so its drains, taints and
	// tolerations are the last valid state. A fallback plan records what it fell back to:
	// no change.
	if r.record != nil {
		wrote, err := r.record.write(ctx, tm, pl)
		if err != nil {
			return res, err
		}
		if wrote {
			log.Info("recorded the last valid drains, taints and tolerations", zap.String("configmap", RecordName(tm.Name)))
		}
	}
	return res, nil
}

// standing is where the map's Published condition stands with the plan (model.Standing,
// Published set after the announce), and whether every sink already carries the plan.
func (r *reconciler) standing(tm *v1beta1.TrafficMap, pl *model.Planned) (model.Standing, bool, error) {
	carried, durable, kept := true, false, true
	for _, s := range r.sinks {
		c := s.Carries(&pl.Plan)
		carried = carried && c
		if _, ok := s.(model.Durable); ok {
			durable, kept = true, kept && c
		}
	}
	if r.record != nil {
		// With no Durable sink the record stands in for one: it is written for a content
		// only after that content was announced, so together with a True condition it
		// proves the condition was about this content (recordStore.carries).
		c, err := r.record.carries(tm, &pl.Plan)
		if err != nil {
			return model.Standing{}, false, err
		}
		carried, durable, kept = carried && c, true, kept && c
	}
	// A map with no Published condition claims nothing yet, so it has nothing to protect
	// while clients reconnect (and a cold start of N new maps is not held by the grace).
	var st model.Standing
	st.Confirmed = durable && kept && model.PublishedTrue(tm)
	st.PublishedBefore = model.FindPublished(tm) == nil || st.Confirmed
	return st, carried, nil
}

// decideAndWrite decides the Published condition from the sinks' confirmations, prunes the
// claim journal of names no sink serves for the map any more, writes the status when it
// differs, and moves ramps on.
func (r *reconciler) decideAndWrite(ctx context.Context, key cache.ObjectName, res applied, g model.Gathered, log *zap.Logger) (time.Duration, error) {
	tm, pl, confs := res.tm, res.pl, res.confs
	want := model.Decide(tm, pl, confs)
	want.Confirmed = res.confirmed
	// Every sink applied the plan: names the map no longer claims are not served for it any
	// more, so they leave its journal now (and other maps may be granted them).
	// A sink that refused the plan (a contested hostname, a retained last positive route)
	// may still serve the old names: then they stay.
	// Entries that do not count (model.Evidence.Ignored) are dropped too: they grant nothing.
	dropped, keep := journaledNotClaimed(pl.Self), keptNames(pl.Self)
	if slices.ContainsFunc(confs, func(c model.Confirmation) bool { return c.State == model.Refused }) || len(pl.Plan.Conflicts) > 0 {
		dropped, keep = nil, model.UniqueNames(pl.Self.Journaled)
	}
	var err error
	if want.Journal, err = model.JournalOf(tm, r.publisher, r.digest, keep); err != nil {
		return 0, err
	}
	if want.Published {
		if lp := model.LastPositive(tm, &pl.Plan, r.digest); lp != nil {
			want.Journal.LastPositive = lp
		}
	}
	// A map turning True from False is checked against the live inputs. So is a map's
	// first True (no condition yet) while the caches may lag: a map created again during an
	// API server restart must not be published without a taint its re-listing cache has not
	// delivered yet. A cold start with healthy caches reads nothing live.
	first := model.FindPublished(tm) == nil && r.lagging != nil && r.lagging()
	// lieplant.KindIgnoredInput also skips this check: its kept taints are older than the
	// live ones for good, which would hold the map Publishing instead of lying.
	ignoring := lieplant.On && lieplant.Is(lieplant.KindIgnoredInput)
	if want.Published && !model.PublishedTrue(tm) && (model.FindPublished(tm) != nil || first) && !ignoring {
		if retry, err := r.fresh(ctx, tm, g, log); retry || err != nil {
			return sourceRetry, err
		}
	}
	if !want.Published && log.Core().Enabled(zap.DebugLevel) {
		log.Debug("not published yet", zap.String("reason", want.Condition.Reason), zap.String("message", want.Condition.Message))
	}
	written, hold, err := r.status.write(ctx, tm, want, log)
	if res.tableHeld && (hold <= 0 || hold > claimRetry) {
		// The holder's journal write reconciles this map again; a failed write of it or its
		// deletion may not, so it is looked at again after claimRetry anyway.
		hold = claimRetry
	}
	if err == nil && hold == 0 && len(dropped) > 0 && !slices.Equal(model.JournaledNames(written, r.publisher), model.JournaledNames(tm, r.publisher)) {
		r.claims.release(types.NamespacedName(key), dropped)
		log.Info("claim journal dropped names no longer claimed", zap.Strings("names", dropped))
	}
	if err == nil {
		// the journal first, then the record: a name leaves the record once no journal holds it
		if err = keeper(r).pruneRecord(ctx, written); err != nil {
			return 0, err
		}
	}
	if err != nil || len(pl.Computed.Ramps) == 0 {
		return hold, err
	}
	next, err := r.advanceRamps(ctx, tm, g, pl, confs, log)
	if err != nil {
		return 0, err
	}
	if hold <= 0 || (next > 0 && next < hold) {
		hold = next
	}
	return hold, nil
}

// fresh is asked before a condition turns True: the decision must not be older than the
// InferenceService it was made from. A drain patched after the cache was read (`publisher
// drain` flips Published False, then patches) would otherwise be reported as published by a
// decision about the weights before it; the informer's event reconciles it next. The same
// for the taints of its clusters, which `publisher taint` patches after its flip, and whose
// source no informer may watch yet. retry is true when either moved on.
func (r *reconciler) fresh(ctx context.Context, tm *v1beta1.TrafficMap, g model.Gathered, log *zap.Logger) (retry bool, _ error) {
	live, err := r.inputs.sourceVersion(ctx, tm.Namespace, tm.Spec.Service)
	if err != nil {
		return false, err
	}
	if live != g.Source.ResourceVersion {
		log.Debug("inferenceservice changed since the cache was read; deciding again",
			zap.String("cached", g.Source.ResourceVersion), zap.String("live", live))
		return true, nil
	}
	if stale, err := r.inputs.staleClusters(ctx, tm, g.Inputs.Clusters); err != nil || stale != "" {
		log.Debug("cluster taints changed since the cache was read; deciding again", zap.String("stale", stale), zap.Error(err))
		return true, err
	}
	return false, nil
}

// advanceRamps moves the map's ramps on (weights.AdvanceRamps) once their current step is
// in place on every sink: it stores the next step in the InferenceService's ramp
// annotation, whose change reconciles every map of the service again, or removes the ramps
// that ended. It returns how long until a step is due (0 for none), or sourceRetry when the
// InferenceService moved on since it was read. The annotation is the ramp's only state:
// a restarted publisher or a new leader continues from the step stored there.
func (r *reconciler) advanceRamps(ctx context.Context, tm *v1beta1.TrafficMap, g model.Gathered, pl *model.Planned, confs []model.Confirmation, log *zap.Logger) (time.Duration, error) {
	if len(pl.Plan.Conflicts) > 0 {
		return 0, nil // the step is not served for this map's hostname: wait for the owner
	}
	for _, c := range confs {
		if c.State != model.InPlace {
			return 0, nil // the sink's confirmation reconciles the map again
		}
	}
	now := r.status.now() // the status writer's clock
	ramps := pl.Computed.Ramps
	next, changed, due := weights.AdvanceRamps(ramps, pl.Computed.Progress, now)
	if !changed {
		if due.IsZero() {
			return 0, nil
		}
		return max(due.Sub(now), time.Millisecond), nil
	}
	err := r.inputs.writeRamps(ctx, g.Source.Namespace, g.Source.Name, g.Source.ResourceVersion, weights.EncodeRamps(next))
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return sourceRetry, nil
	}
	if err != nil {
		return 0, err
	}
	for _, p := range pl.Computed.Progress {
		i := slices.IndexFunc(next, func(n weights.Ramp) bool { return n.Cluster == p.Cluster })
		switch {
		case i < 0:
			r.metrics.rampStep(string(p.Direction))
			r.status.event(tm, model.ReasonRampFinished, fmt.Sprintf("ramp of %s %s finished: step %d of %d is the %s's weights", p.Cluster, p.Direction, p.Steps, p.Steps, finalWord(p.Direction)))
		case next[i].Step != p.Step:
			r.metrics.rampStep(string(p.Direction))
			if p.Step == 0 {
				r.status.event(tm, model.ReasonRampStarted, fmt.Sprintf("ramp of %s %s started: %d steps over %s, the last due %s",
					p.Cluster, p.Direction, p.Steps, next[i].Duration, p.End.UTC().Format(time.RFC3339)))
			}
		}
	}
	log.Info("ramp moved on", zap.String("ramps", weights.EncodeRamps(next)))
	return 0, nil
}

// claimRetry is how soon a map whose name another map is being granted (claim table) is
// reconciled again.
const claimRetry = time.Second

// claim grants the map its claimable names that no other map holds in the claim table and
// writes them into its claim journal, before any sink serves them. It returns the map as
// stored and the plan made again from it (the granted names are then owned). A name the
// table holds for another map stays a conflict naming that map, and held is true; the
// grants of a holder the cache no longer has (deleted) are dropped first. A journal of
// another publisher that this one adopts or takes over (model.Holding.Replaces) is replaced
// as a whole, even with no name granted: the other's claims and last positive plan go.
func (r *reconciler) claim(ctx context.Context, tm *v1beta1.TrafficMap, g model.Gathered, pl *model.Planned, log *zap.Logger) (
	_ *v1beta1.TrafficMap, _ *model.Planned, held bool, _ error) {
	key := model.KeyOf(tm)
	granted, added, holders := r.claims.reserve(key, pl.Claimable)
	stale := false
	for _, h := range holders {
		if other, err := r.inputs.trafficMap(h.Key.Namespace, h.Key.Name); err == nil && (other == nil || other.DeletionTimestamp != nil) {
			r.claims.forget(h.Key) // its delete is being reconciled; its grants are void
			stale = true
		}
	}
	if stale {
		var more []string
		granted, more, holders = r.claims.reserve(key, pl.Claimable)
		added = append(added, more...)
	}
	if from := model.HolderOf(tm, keeper(r).publishers()); len(granted) > 0 || from.Replaces() {
		j, err := model.JournalOf(tm, r.publisher, r.digest, append(slices.Clone(pl.Self.Journaled), granted...))
		if err != nil {
			r.claims.release(key, added)
			return tm, pl, false, err
		}
		// the record first: a journal entry counts only once the record grants it
		if err := keeper(r).recordGrants(ctx, tm, pl.Self, granted); err != nil {
			r.claims.release(key, added)
			return tm, pl, false, err
		}
		write := r.status.writeJournal
		if from.Replaces() {
			write = r.status.replaceJournal
		}
		updated, err := write(ctx, tm, j)
		if err != nil {
			r.claims.release(key, added)
			return tm, pl, false, err
		}
		if from.Replaces() {
			log.Info("took the trafficmap over from another publisher", zap.String("from", from.Publisher), zap.Bool("handedOver", from.Hold == model.HoldTakeOver))
		}
		log.Info("claimed names", zap.Strings("names", granted), zap.Strings("journal", j.ClaimedTargets))
		tm = updated
		g.Inputs.TrafficMap = tm
		g.Evidence = r.inputs.evidence(tm) // the record and the journal both hold the grants now
		if pl, err = r.plan(g); err != nil {
			return tm, pl, false, err
		}
	}
	for i, c := range pl.Plan.Conflicts {
		if h, ok := holders[c.Hostname]; ok && c.Unjournaled {
			pl.Plan.Conflicts[i] = model.Conflict{Hostname: c.Hostname, Owner: model.Owner{Kind: model.KindTrafficMap, Namespace: h.Key.Namespace, Name: h.Key.Name, Hostname: h.Name}}
		}
	}
	return tm, pl, len(holders) > 0, nil
}

// keptNames are the names the map's journal keeps after a plan for self was applied: the
// journaled ones (that count) self still claims.
func keptNames(self model.Claim) []string {
	claimed := model.UniqueNames(self.Names)
	return slices.DeleteFunc(model.UniqueNames(self.Journaled), func(n string) bool { return !slices.Contains(claimed, n) })
}

// journaledNotClaimed are the names the map's journal holds (that count) that self no
// longer claims.
func journaledNotClaimed(self model.Claim) []string {
	claimed := model.UniqueNames(self.Names)
	return slices.DeleteFunc(model.UniqueNames(self.Journaled), func(n string) bool { return slices.Contains(claimed, n) })
}

// finalWord names what a ramp's last step is: the drain's weights (down) or the undrain's.
func finalWord(d weights.RampDirection) string {
	if d == weights.RampUp {
		return "undrain"
	}
	return "drain"
}

// sourceRetry is how soon a map is reconciled again when its InferenceService changed
// after the cache was read (the informer's event normally comes first).
const sourceRetry = time.Second

// refusal is the first refusal, in sink order, of plan by sinks (model.Sink.Check), its
// message saying that no sink publishes the plan; nil when every sink can carry it.
func refusal(sinks []model.Sink, plan *model.Plan) *model.Confirmation {
	for _, s := range sinks {
		if c := s.Check(plan); c != nil {
			refused := *c
			refused.Sink, refused.State = s.Name(), model.Refused
			refused.Message += fmt.Sprintf("; the %s sink refuses these weights, so no sink publishes them and each keeps what it published before", s.Name())
			return &refused
		}
	}
	return nil
}

// delete removes what every sink published for a deleted map and forgets it.
func (r *reconciler) delete(ctx context.Context, key cache.ObjectName, log *zap.Logger) error {
	r.metrics.forget(key)
	r.holders.changed(types.NamespacedName(key), "")
	r.status.forget(types.NamespacedName(key))
	r.claims.forget(types.NamespacedName(key))
	if r.teardowns != nil {
		r.teardowns.forget(types.NamespacedName(key))
	}
	var errs []error
	for _, s := range r.sinks {
		n, err := s.Delete(ctx, key.Namespace, key.Name)
		if n > 0 {
			log.Info("removed published objects of deleted trafficmap", zap.String("sink", s.Name()), zap.Int("objects", n))
		}
		errs = append(errs, err)
	}
	if r.record != nil {
		if _, err := r.record.delete(ctx, key.Namespace, key.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if r.grants != nil { // after the sinks removed what they served: the claim record goes last
		return r.grants.remove(ctx, key.Namespace, key.Name)
	}
	return nil
}

// serve runs the pipeline's first floors for key on a replica that does not lead: gather,
// plan and check, then hand the plan to the sinks that serve on every replica
// (model.Serving), with the same decision as the leader's pipeline: a plan that cannot be
// made, or that an enabled sink refuses, is handed to none (each keeps the last plan it was
// given), and a deleted map is withdrawn, unless the finalizer holds it for this publisher:
// then its plan at weight 0 is served until it is gone (the leader tears it down in
// order). Nothing is claimed, written or recorded. It also primes those sinks before they
// start.
func (r *reconciler) serve(key cache.ObjectName) error {
	serving := servingOf(r.sinks)
	if len(serving) == 0 {
		return nil
	}
	tm, err := r.inputs.trafficMap(key.Namespace, key.Name)
	if err != nil {
		return err
	}
	if model.Finalizing(tm, keeper(r).publishers()) || model.TornDownByOther(tm, keeper(r).publishers()) {
		zero, err := r.zeroPlan(tm)
		return serveZeros(zero, err, r.sinks, serving)
	}
	if tm == nil || tm.DeletionTimestamp != nil {
		for _, sv := range serving {
			sv.Withdraw(types.NamespacedName{Namespace: key.Namespace, Name: key.Name})
		}
		return nil
	}
	return r.serveMap(tm, serving)
}

// serveMap is serve for a map tm that exists, handing its plan to serving. The plan is made
// as the map's holder has it (heldEvidence): with another known publisher's journal (a map
// it holds, or one handed over that the leader has not taken yet), the names that publisher
// journaled are the map's unless this publisher granted them to another map, so every
// replica serves what the holder computes (holders.go); a journal naming an unknown
// publisher counts for nothing.
func (r *reconciler) serveMap(tm *v1beta1.TrafficMap, serving []model.Serving) error {
	var ue *model.UserError
	g, err := r.inputs.gather(tm)
	if errors.As(err, &ue) {
		return nil // the leader reports it; the last plan given stays
	}
	if err != nil {
		return err
	}
	g.Evidence = keeper(r).heldEvidence(tm, g.Evidence, g.Policy)
	pl, err := r.plan(g)
	if errors.As(err, &ue) {
		return nil
	}
	if err != nil {
		return err
	}
	if refusal(r.sinks, &pl.Plan) != nil {
		return nil
	}
	if servedBeforeJournals(tm) {
		// Published by a version without claim journals: keep serving the names no one
		// holds while the leader's first reconcile journals them (an upgrade's journal wave
		// takes minutes at fleet scale, and a proxyless client reconnecting to an upgraded
		// replica would otherwise find no listener for its name). Names another map
		// journaled stay conflicts.
		pl.Plan.Conflicts = slices.DeleteFunc(pl.Plan.Conflicts, func(c model.Conflict) bool { return c.Unjournaled })
	}
	for _, sv := range serving {
		sv.Serve(&pl.Plan)
	}
	return nil
}

// serveZeros hands the serving sinks zero, the plan at weight 0 of a map the finalizer holds
// while the leader tears it down (reconciler.zeroPlan, which failed with err); when none
// can be made (a user error), or an enabled sink refuses it, they keep the last plan they
// were given.
func serveZeros(zero *model.Plan, err error, sinks []model.Sink, serving []model.Serving) error {
	var ue *model.UserError
	if errors.As(err, &ue) || err == nil && refusal(sinks, zero) != nil {
		return nil
	}
	if err != nil {
		return err
	}
	for _, sv := range serving {
		sv.Serve(zero)
	}
	return nil
}

// servedBeforeJournals reports whether tm was published by a publisher version that wrote
// no claim journal: it has a Published condition but no status.publisher. A new map (no
// condition yet) is served only once journaled.
func servedBeforeJournals(tm *v1beta1.TrafficMap) bool {
	return tm.Status.Publisher == nil && model.FindPublished(tm) != nil
}

// servingOf are the sinks among sinks that serve on every replica (model.Serving).
func servingOf(sinks []model.Sink) []model.Serving {
	var out []model.Serving
	for _, s := range sinks {
		if sv, ok := s.(model.Serving); ok {
			out = append(out, sv)
		}
	}
	return out
}
