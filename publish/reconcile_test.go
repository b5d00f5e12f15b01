package publish

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	omeac "github.com/trafficmap/publisher/api/client/applyconfiguration/api/v1beta1"
	"github.com/trafficmap/publisher/api/v1beta1"
	"github.com/trafficmap/publisher/httproute"
	"github.com/trafficmap/publisher/model"
	"github.com/trafficmap/publisher/weights"
)

// fakeSink answers every plan with conf (or err) and records what it was asked; refuses,
// when set, is its Check.
type fakeSink struct {
	name    string
	carries bool
	conf    model.Confirmation
	err     error
	refuses func(*model.Plan) *model.Confirmation

	mu      sync.Mutex
	applied []model.Plan
	// given are the plans Apply was handed, as handed; standing what it was judged with.
	given    []*model.Plan
	standing []model.Standing
	deleted  []string
}

func (f *fakeSink) Name() string { return f.name }
func (f *fakeSink) Check(p *model.Plan) *model.Confirmation {
	if f.refuses == nil {
		return nil
	}
	return f.refuses(p)
}
func (f *fakeSink) Carries(*model.Plan) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.carries
}
func (f *fakeSink) Apply(_ context.Context, p *model.Plan, st model.Standing) (model.Confirmation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, *p)
	f.given = append(f.given, p)
	f.standing = append(f.standing, st)
	c := f.conf
	c.Sink = f.name
	if f.err == nil && c.State != model.Refused {
		f.carries = true // what it applied is what it carries
	}
	return c, f.err
}
func (f *fakeSink) Delete(_ context.Context, namespace, name string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, namespace+"/"+name)
	return 1, nil
}

// servingSink is a fakeSink that serves on every replica (model.Serving): it records the
// plans handed to it by key, and the maps withdrawn.
type servingSink struct {
	*fakeSink
	served    map[string][]*model.Plan
	withdrawn []string
}

func (s *servingSink) Serve(p *model.Plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.served == nil {
		s.served = map[string][]*model.Plan{}
	}
	s.served[p.Key().String()] = append(s.served[p.Key().String()], p)
}

func (s *servingSink) Withdraw(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.withdrawn = append(s.withdrawn, key.String())
}

// last is the last plan served for key, nil for none.
func (s *servingSink) last(key string) *model.Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ps := s.served[key]; len(ps) > 0 {
		return ps[len(ps)-1]
	}
	return nil
}

// fakeStatusAPI keeps one map; ApplyStatus applies the publisher's status body to it, and
// conflicts, as the API server does, when the body names another resourceVersion.
type fakeStatusAPI struct {
	tm        *v1beta1.TrafficMap
	conflicts int // the next ApplyStatus calls that conflict
	applies   int
	// heldApplies counts the ApplyHeldStatus calls among applies.
	heldApplies int
	// finalizerWrites counts AddFinalizer and RemoveFinalizer calls that wrote.
	finalizerWrites int
	// published are the Published conditions applied, in order.
	published []metav1.Condition
}

// AddFinalizer adds model.Finalizer, conflicting as the API server does on a stale
// resourceVersion.
func (f *fakeStatusAPI) AddFinalizer(_ context.Context, tm *v1beta1.TrafficMap) (*v1beta1.TrafficMap, error) {
	return f.setFinalizers(tm, append(slices.Clone(f.tm.Finalizers), model.Finalizer))
}

// RemoveFinalizer removes model.Finalizer, conflicting on a stale resourceVersion.
func (f *fakeStatusAPI) RemoveFinalizer(_ context.Context, tm *v1beta1.TrafficMap) (*v1beta1.TrafficMap, error) {
	return f.setFinalizers(tm, model.WithoutFinalizer(f.tm))
}

func (f *fakeStatusAPI) setFinalizers(tm *v1beta1.TrafficMap, finalizers []string) (*v1beta1.TrafficMap, error) {
	if tm.ResourceVersion != f.tm.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Group: "ome.io", Resource: "trafficmaps"}, f.tm.Name, errors.New("stale"))
	}
	f.finalizerWrites++
	updated := f.tm.DeepCopy()
	updated.Finalizers = finalizers
	updated.ResourceVersion += "1"
	f.tm = updated
	return updated.DeepCopy(), nil
}

func (f *fakeStatusAPI) Get(context.Context, string, string) (*v1beta1.TrafficMap, error) {
	return f.tm.DeepCopy(), nil
}

func (f *fakeStatusAPI) ApplyStatus(_ context.Context, ac *omeac.TrafficMapApplyConfiguration) (*v1beta1.TrafficMap, error) {
	f.applies++
	if f.conflicts > 0 || (ac.ResourceVersion != nil && *ac.ResourceVersion != f.tm.ResourceVersion) {
		f.conflicts = max(f.conflicts-1, 0)
		return nil, apierrors.NewConflict(schema.GroupResource{Group: "ome.io", Resource: "trafficmaps"}, f.tm.Name, errors.New("stale"))
	}
	tm := f.tm.DeepCopy()
	st := ac.Status
	tm.Status.Published = *st.Published
	tm.Status.ObservedTrafficMapGeneration = ptr.Deref(st.ObservedTrafficMapGeneration, 0)
	tm.Status.GatewayRef = nil
	if r := st.GatewayRef; r != nil {
		tm.Status.GatewayRef = &v1beta1.TrafficMapGatewayRef{Group: ptr.Deref(r.Group, ""), Kind: *r.Kind, Name: *r.Name, Namespace: ptr.Deref(r.Namespace, "")}
	}
	// The publisher's conditions are the field manager's: one the request leaves out is
	// removed, as server-side apply does.
	for _, typ := range []string{v1beta1.ConditionPublished, v1beta1.ConditionPublicationFallback} {
		meta.RemoveStatusCondition(&tm.Status.Conditions, typ)
	}
	for _, c := range st.Conditions {
		cond := metav1.Condition{Type: *c.Type, Status: *c.Status, Reason: *c.Reason,
			Message: *c.Message, ObservedGeneration: *c.ObservedGeneration, LastTransitionTime: *c.LastTransitionTime}
		meta.SetStatusCondition(&tm.Status.Conditions, cond)
		if cond.Type == v1beta1.ConditionPublished {
			f.published = append(f.published, cond)
		}
	}
	if j := st.Publisher; j != nil {
		tm.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: *j.PublisherName, ClaimedTargets: j.ClaimedTargets,
			ObservedOptionsDigest: ptr.Deref(j.ObservedOptionsDigest, "")}
		if lp := j.LastPositive; lp != nil {
			out := &v1beta1.TrafficMapPublisherLastPositive{TrafficMapGeneration: *lp.TrafficMapGeneration,
				ObservedISVCGeneration: *lp.ObservedISVCGeneration, PlanCompatibilityDigest: *lp.PlanCompatibilityDigest}
			for _, t := range lp.Targets {
				out.Targets = append(out.Targets, v1beta1.TrafficMapPublisherTarget{Target: *t.Target, Weight: *t.Weight})
			}
			tm.Status.Publisher.LastPositive = out
		}
	}
	tm.ResourceVersion += "1"
	f.tm = tm
	return tm.DeepCopy(), nil
}

// ApplyHeldStatus is ApplyStatus under another field manager: it sets only what the request
// names (the Published condition and status.published) and removes nothing of the holder's.
func (f *fakeStatusAPI) ApplyHeldStatus(_ context.Context, ac *omeac.TrafficMapApplyConfiguration) (*v1beta1.TrafficMap, error) {
	f.applies++
	f.heldApplies++
	if ac.ResourceVersion != nil && *ac.ResourceVersion != f.tm.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Group: "ome.io", Resource: "trafficmaps"}, f.tm.Name, errors.New("stale"))
	}
	tm := f.tm.DeepCopy()
	tm.Status.Published = *ac.Status.Published
	for _, c := range ac.Status.Conditions {
		meta.SetStatusCondition(&tm.Status.Conditions, metav1.Condition{Type: *c.Type, Status: *c.Status, Reason: *c.Reason,
			Message: *c.Message, ObservedGeneration: *c.ObservedGeneration, LastTransitionTime: *c.LastTransitionTime})
	}
	tm.ResourceVersion += "1"
	f.tm = tm
	return tm.DeepCopy(), nil
}

func (f *fakeStatusAPI) ReplaceJournal(_ context.Context, tm *v1beta1.TrafficMap, journal *v1beta1.TrafficMapPublisherStatus) (*v1beta1.TrafficMap, error) {
	f.applies++
	if tm.ResourceVersion != f.tm.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Group: "ome.io", Resource: "trafficmaps"}, f.tm.Name, errors.New("stale"))
	}
	updated := f.tm.DeepCopy()
	updated.Status.Publisher = journal.DeepCopy()
	updated.ResourceVersion += "1"
	f.tm = updated
	return updated.DeepCopy(), nil
}

// fakeInputs serves one map and its InferenceService's annotations from memory, model.Gathered
// the way the caches gather.
type fakeInputs struct {
	tm          *v1beta1.TrafficMap
	annotations map[string]string
	noSource    bool
	err         error
	claims      []model.Claim // other maps' claims on names
	global      string        // the ome.io/global-host annotation; "" is chat.example.com
	policy      model.ClaimPolicy
	// cachedRV and liveRV are the InferenceService's resourceVersion in the cache and on
	// the API server; they differ while the cache is behind.
	cachedRV, liveRV string
	rampWrites       []string
}

func (f *fakeInputs) sourceVersion(context.Context, string, string) (string, error) {
	return f.liveRV, nil
}

// writeRamps stores the ramp annotation as the API server would, conflicting when the
// InferenceService moved on; the cache sees the write at once.
func (f *fakeInputs) writeRamps(_ context.Context, _, _, rv, value string) error {
	if rv != f.liveRV {
		return apierrors.NewConflict(schema.GroupResource{Group: "ome.io", Resource: "inferenceservices"}, "chat", errors.New("stale"))
	}
	f.annotations = maps.Clone(f.annotations)
	if value == "" {
		delete(f.annotations, weights.RampAnnotation)
	} else {
		f.annotations[weights.RampAnnotation] = value
	}
	f.rampWrites = append(f.rampWrites, value)
	f.liveRV += "1"
	f.cachedRV = f.liveRV
	return nil
}

func (f *fakeInputs) trafficMap(string, string) (*v1beta1.TrafficMap, error) { return f.tm, f.err }
func (f *fakeInputs) gather(tm *v1beta1.TrafficMap) (model.Gathered, error) {
	if f.noSource {
		return model.Gathered{}, &model.UserError{Reason: model.ReasonSourceNotFound, Message: "inferenceservice prod/chat does not exist"}
	}
	isvc := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: tm.Namespace, Name: tm.Spec.Service, Annotations: f.annotations,
		ResourceVersion: f.cachedRV}}
	global := f.global
	if global == "" {
		global = "chat.example.com"
	}
	return model.Gathered{Source: isvc, GlobalHost: global, Inputs: model.Inputs{TrafficMap: tm, SourceAnnotations: f.annotations}, Claims: f.claims,
		Evidence: f.evidence(tm), Policy: f.policy}, nil
}

// evidence trusts the journal under the policy (model.LegacyEvidence): these tests keep no
// claim records (claims_test.go tests them over the caches).
func (f *fakeInputs) evidence(tm *v1beta1.TrafficMap) model.Evidence {
	return model.LegacyEvidence(tm, testPublisher, f.policy)
}

// testPublisher is the publisherName of the unit tests' claim journals.
const testPublisher = DefaultFieldManager

type fixture struct {
	inputs *fakeInputs
	api    *fakeStatusAPI
	sinks  []*fakeSink
	events *record.FakeRecorder
	rec    *reconciler
	clock  time.Time
	key    cache.ObjectName
}

func newFixture(t *testing.T, sinks ...*fakeSink) *fixture {
	t.Helper()
	tm := fleetMap()
	tm.UID, tm.Generation, tm.ResourceVersion = types.UID("uid-1"), 3, "1"
	// Its names are journaled already (a map the publisher claimed for before); the claim
	// step is tested on its own (TestReconcileClaimsBeforeSinks).
	tm.Status.Publisher = &v1beta1.TrafficMapPublisherStatus{PublisherName: testPublisher,
		ClaimedTargets: []string{"grpc:chat.prod", "hostname:chat.example.com"}, ObservedOptionsDigest: model.OptionsDigest(nil)}
	// And it carries the finalizer, added before that claim (TestFinalizerAddedBeforeTheFirstWrite).
	tm.Finalizers = []string{model.Finalizer}
	f := &fixture{inputs: &fakeInputs{tm: tm}, api: &fakeStatusAPI{tm: tm}, sinks: sinks, events: record.NewFakeRecorder(32),
		clock: time.Unix(1000, 0), key: cache.NewObjectName("prod", "chat")}
	var ss []model.Sink
	for _, s := range sinks {
		ss = append(ss, s)
	}
	status := newStatusWriter(f.api, f.events, nil)
	status.now = func() time.Time { return f.clock }
	f.rec = &reconciler{inputs: f.inputs, hosts: httproute.Config{Gateway: types.NamespacedName{Name: "g"}}, sinks: ss, status: status,
		claims: newClaimTable(), publisher: testPublisher, digest: model.OptionsDigest(nil), teardowns: newTeardownClock(DefaultTeardownTimeout)}
	f.rec.teardowns.now = func() time.Time { return f.clock }
	return f
}

// run reconciles once and then makes the stored map the cached one, as the informer would.
func (f *fixture) run(t *testing.T) (time.Duration, error) {
	t.Helper()
	hold, err := f.rec.reconcile(t.Context(), f.key, zaptest.NewLogger(t))
	if f.inputs.tm != nil {
		f.inputs.tm = f.api.tm.DeepCopy()
	}
	return hold, err
}

func (f *fixture) published() *metav1.Condition { return model.FindPublished(f.api.tm) }

func (f *fixture) event() string {
	select {
	case e := <-f.events.Events:
		return e
	default:
		return ""
	}
}

func inPlace(msg string) *fakeSink {
	return &fakeSink{name: "a", conf: model.Confirmation{State: model.InPlace, Message: msg}}
}

func TestReconcile(t *testing.T) {
	t.Run("publish: every sink in place", func(t *testing.T) {
		route, xds := inPlace("route stored"), inPlace("xds version v1 ACKed by 2/2 clients")
		ref := &v1beta1.TrafficMapGatewayRef{Kind: "HTTPRoute", Name: "chat-global", Namespace: "prod"}
		route.conf.GatewayRef = ref
		f := newFixture(t, route, xds)
		_, err := f.run(t)
		require.NoError(t, err)
		c := f.published()
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionTrue, c.Status)
		assert.Equal(t, string(model.ReasonPublished), c.Reason)
		assert.Equal(t, int64(3), c.ObservedGeneration)
		assert.Equal(t, "route stored; xds version v1 ACKed by 2/2 clients; weights worker-a=1, worker-b=1", c.Message)
		assert.True(t, f.api.tm.Status.Published)
		assert.Equal(t, int64(3), f.api.tm.Status.ObservedTrafficMapGeneration)
		assert.Equal(t, ref, f.api.tm.Status.GatewayRef)
		assert.Empty(t, f.event(), "a first publication is not news")
		require.Len(t, route.applied, 1)
		assert.Equal(t, []string{"chat.example.com"}, route.applied[0].Hostnames)

		applies := f.api.applies
		_, err = f.run(t)
		require.NoError(t, err)
		assert.Equal(t, applies, f.api.applies, "an unchanged status is not written again")
	})

	t.Run("pending: one sink waits", func(t *testing.T) {
		f := newFixture(t, inPlace("route stored"), &fakeSink{name: "b", conf: model.Confirmation{State: model.Pending, Message: "waiting for gateway prod/g"}})
		hold, err := f.run(t)
		require.NoError(t, err)
		assert.Equal(t, freshQuiet, hold, "a new map's first status waits while it only says Publishing")
		assert.Nil(t, f.published(), "its column stays empty meanwhile")
		f.clock = f.clock.Add(freshQuiet)
		_, err = f.run(t)
		require.NoError(t, err)
		c := f.published()
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(model.ReasonPublishing), c.Reason)
		assert.Equal(t, "waiting for gateway prod/g", c.Message)
		assert.False(t, f.api.tm.Status.Published)
	})

	t.Run("refusal: the sink cannot carry the plan", func(t *testing.T) {
		f := newFixture(t, &fakeSink{name: "a", conf: model.Confirmation{State: model.Refused, Reason: model.ReasonRouteConflict,
			Message: `httproute prod/chat-global exists and is not owned by the publisher`}})
		_, err := f.run(t)
		require.NoError(t, err, "a user error is not retried")
		c := f.published()
		assert.Equal(t, string(model.ReasonRouteConflict), c.Reason)
		assert.Contains(t, c.Message, "not owned by the publisher")
		assert.Contains(t, f.event(), "Warning RouteConflict")
	})

	t.Run("rejection: a consumer rejected the content", func(t *testing.T) {
		f := newFixture(t, inPlace("route stored"), &fakeSink{name: "b", conf: model.Confirmation{State: model.Rejected, Reason: model.ReasonXDSRejected,
			Message: "xds client node-1 rejected version v2 (RouteConfiguration): bad"}})
		_, err := f.run(t)
		require.NoError(t, err)
		c := f.published()
		assert.Equal(t, string(model.ReasonXDSRejected), c.Reason)
		assert.Equal(t, metav1.ConditionFalse, c.Status)
	})

	t.Run("user error: malformed drain and nothing to fall back to", func(t *testing.T) {
		s := inPlace("route stored")
		f := newFixture(t, s)
		f.inputs.annotations = map[string]string{weights.DrainAnnotation: `{"x":{}}`}
		_, err := f.run(t)
		require.NoError(t, err)
		assert.Equal(t, string(model.ReasonInvalidDrainAnnotation), f.published().Reason)
		assert.Empty(t, s.applied, "nothing is published")
	})

	t.Run("user error: source missing", func(t *testing.T) {
		s := inPlace("route stored")
		f := newFixture(t, s)
		f.inputs.noSource = true
		_, err := f.run(t)
		require.NoError(t, err)
		assert.Equal(t, string(model.ReasonSourceNotFound), f.published().Reason)
		assert.Empty(t, s.applied)
	})

	t.Run("transient error: retried, status untouched", func(t *testing.T) {
		boom := errors.New("connection refused")
		f := newFixture(t, &fakeSink{name: "a", err: boom})
		_, err := f.run(t)
		require.ErrorIs(t, err, boom)
		assert.Nil(t, f.published())
		assert.Zero(t, f.api.applies)
	})

	t.Run("deletion: every sink removes the map and nothing is remembered", func(t *testing.T) {
		a, b := inPlace("x"), inPlace("y")
		f := newFixture(t, a, b)
		f.rec.status.progress[types.NamespacedName(f.key)] = f.clock
		f.inputs.tm = nil
		_, err := f.run(t)
		require.NoError(t, err)
		assert.Equal(t, []string{"prod/chat"}, a.deleted)
		assert.Equal(t, []string{"prod/chat"}, b.deleted)
		assert.Empty(t, f.rec.status.progress)
	})

	t.Run("announce: True for other content says Publishing before the sinks apply", func(t *testing.T) {
		s := inPlace("route stored")
		f := newFixture(t, s)
		_, err := f.run(t)
		require.NoError(t, err)
		require.Equal(t, metav1.ConditionTrue, f.published().Status)
		f.event()

		s.carries = false // a drain: the sink no longer carries the plan
		f.inputs.annotations = map[string]string{weights.DrainAnnotation: `{"m-a":{"cluster":"worker-a","reason":"maintenance"}}`}
		before := f.api.applies
		_, err = f.run(t)
		require.NoError(t, err)
		assert.Equal(t, before+2, f.api.applies, "Publishing, then Published")
		announced := f.api.published[len(f.api.published)-2]
		assert.Equal(t, string(model.ReasonPublishing), announced.Reason)
		assert.Equal(t, "publishing weights worker-a=0 (drained by m-a), worker-b=1", announced.Message)
		assert.Empty(t, f.event(), "a drain's routine steps are no news")
		assert.Contains(t, f.published().Message, "worker-a=0 (drained by m-a)")
		assert.Equal(t, metav1.ConditionTrue, f.published().Status)
	})

	t.Run("a drain the gateway accepts soon costs two status writes, not three", func(t *testing.T) {
		route := inPlace("route accepted")
		f := newFixture(t, route)
		_, err := f.run(t)
		require.NoError(t, err)
		require.Equal(t, metav1.ConditionTrue, f.published().Status)

		route.carries = false
		route.conf = model.Confirmation{State: model.Pending, Message: "waiting for gateway prod/g to accept route prod/chat-global generation 2"}
		f.inputs.annotations = map[string]string{weights.DrainAnnotation: `{"m-a":{"cluster":"worker-a","reason":"maintenance"}}`}
		before := f.api.applies
		hold, err := f.run(t)
		require.NoError(t, err)
		assert.Equal(t, before+1, f.api.applies, "Publishing is written; the gateway's pending answer only restates it")
		assert.Equal(t, progressInterval, hold, "reconciled again when the restated message may be written")
		assert.Equal(t, "publishing weights worker-a=0 (drained by m-a), worker-b=1", f.published().Message)

		route.conf = model.Confirmation{State: model.InPlace, Message: "route accepted"}
		_, err = f.run(t)
		require.NoError(t, err)
		assert.Equal(t, before+2, f.api.applies)
		assert.Equal(t, metav1.ConditionTrue, f.published().Status)

		// A gateway that takes longer: the pending message is written once the interval passed.
		route.conf = model.Confirmation{State: model.Pending, Message: "waiting for gateway prod/g to accept route prod/chat-global generation 3"}
		f.inputs.annotations = map[string]string{}
		_, err = f.run(t)
		require.NoError(t, err)
		f.clock = f.clock.Add(progressInterval)
		_, err = f.run(t)
		require.NoError(t, err)
		assert.Equal(t, "waiting for gateway prod/g to accept route prod/chat-global generation 3", f.published().Message)
	})

	t.Run("carried: no announce when the sinks already carry the plan", func(t *testing.T) {
		s := inPlace("route stored")
		s.carries = true
		f := newFixture(t, s)
		_, err := f.run(t)
		require.NoError(t, err)
		assert.Equal(t, 1, f.api.applies)
	})
}

// A map whose hostname another map journaled first holds: the sinks get a plan without it
// (the contested name in Conflicts, the unshared gRPC name still owned), Published is False
// with HostnameConflict naming the owner, with a Warning Event; the claim is not journaled.
// Once the owner is gone, the next reconcile journals the hostname before any sink gets it,
// and publishes it.
func TestReconcileHostnameConflict(t *testing.T) {
	s := inPlace("xds version v1 ACKed by 1/1 clients")
	f := newFixture(t, s)
	f.inputs.tm.Status.Publisher.ClaimedTargets = []string{"grpc:chat.prod"} // the hostname is a new claim
	f.api.tm = f.inputs.tm.DeepCopy()
	owner := claim("staging", "chat", 60, "chat.staging", "chat.example.com") // younger, but journaled first
	owner.Journaled = owner.Names
	f.inputs.claims = []model.Claim{owner}
	_, err := f.run(t)
	require.NoError(t, err)
	c := f.published()
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(model.ReasonHostnameConflict), c.Reason)
	assert.Contains(t, c.Message, "hostname chat.example.com is held by trafficmap staging/chat (hostname chat.example.com, created 2026-12-03T11:00:00Z)")
	assert.False(t, f.api.tm.Status.Published)
	assert.Contains(t, f.event(), "Warning HostnameConflict hostname chat.example.com is held by trafficmap staging/chat")
	require.Len(t, s.applied, 1)
	p := s.applied[0]
	assert.Empty(t, p.Hostnames, "the contested hostname is not in the plan")
	assert.Equal(t, []model.Conflict{{Hostname: "chat.example.com", Owner: model.Owner{Kind: "TrafficMap", Namespace: "staging", Name: "chat",
		Hostname: "chat.example.com", Created: t0.Add(time.Hour)}}}, p.Conflicts)
	assert.True(t, p.Withheld("chat.example.com"))
	assert.False(t, p.Withheld("chat.prod"), "its gRPC name is its own")
	assert.Equal(t, []string{"grpc:chat.prod"}, f.api.tm.Status.Publisher.ClaimedTargets, "a lost claim is not journaled")

	// Hand-over: the owner is gone.
	f.inputs.claims = nil
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, f.published().Status)
	assert.Equal(t, []string{"chat.example.com"}, s.applied[1].Hostnames)
	assert.Empty(t, s.applied[1].Conflicts)
	assert.Equal(t, []string{"grpc:chat.prod", "hostname:chat.example.com"}, f.api.tm.Status.Publisher.ClaimedTargets)

	// Another map claiming the same name now, journaled or not, changes nothing for this
	// one: not journaled, it loses to the journal; journaled too (a race), this map is older.
	for _, other := range []model.Claim{claim("zeta", "chat", 120, "chat.zeta", "chat.example.com"),
		{Kind: model.KindTrafficMap, Namespace: "zeta", Name: "chat", Created: t0.Add(120 * time.Minute), Names: []string{"chat.zeta", "chat.example.com"},
			Journaled: []string{"chat.zeta", "chat.example.com"}}} {
		f.inputs.claims = []model.Claim{other}
		_, err = f.run(t)
		require.NoError(t, err)
		assert.Equal(t, metav1.ConditionTrue, f.published().Status)
		assert.Equal(t, []string{"chat.example.com"}, s.applied[len(s.applied)-1].Hostnames)
	}
}

// A Pending answer that only updates a consumer count is rewritten at most once per
// progressInterval; anything else is written at once.
func TestReconcileProgressHold(t *testing.T) {
	s := &fakeSink{name: "xds", conf: model.Confirmation{State: model.Pending, Message: "waiting for xds clients: 0/100 ACKed",
		Progress: &model.Progress{Confirmed: 0, Total: 100}}}
	f := newFixture(t, s)
	hold, err := f.run(t)
	require.NoError(t, err)
	assert.Equal(t, freshQuiet, hold, "a new map's first Publishing status waits")
	assert.Zero(t, f.api.applies)
	f.clock = f.clock.Add(freshQuiet)
	hold, err = f.run(t)
	require.NoError(t, err)
	assert.Zero(t, hold)
	assert.Equal(t, 1, f.api.applies)

	f.clock = f.clock.Add(200 * time.Millisecond)
	s.conf.Message, s.conf.Progress.Confirmed = "waiting for xds clients: 40/100 ACKed", 40
	hold, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, 800*time.Millisecond, hold, "only the count changed")
	assert.Equal(t, 1, f.api.applies)

	f.clock = f.clock.Add(time.Second)
	hold, err = f.run(t)
	require.NoError(t, err)
	assert.Zero(t, hold, "the interval passed")
	assert.Equal(t, 2, f.api.applies)
	assert.Contains(t, f.published().Message, "40/100")

	f.clock = f.clock.Add(100 * time.Millisecond)
	s.conf = model.Confirmation{State: model.InPlace, Message: "xds version v1 ACKed by 100/100 clients"}
	hold, err = f.run(t)
	require.NoError(t, err)
	assert.Zero(t, hold, "another phase is written at once")
	assert.Equal(t, metav1.ConditionTrue, f.published().Status)
	assert.Empty(t, f.rec.status.progress)
}

// A status conflict is retried once on the live map when it still has the generation the
// status was decided for; after the generation moved, the conflict goes back to the queue
// (no retry loop on a decision that is out of date).
func TestReconcileStatusConflict(t *testing.T) {
	f := newFixture(t, inPlace("route stored"))
	f.api.conflicts = 1
	_, err := f.run(t)
	require.NoError(t, err)
	assert.Equal(t, 2, f.api.applies)
	assert.Equal(t, metav1.ConditionTrue, f.published().Status)

	f = newFixture(t, inPlace("route stored"))
	f.api.conflicts = 5
	f.api.tm = f.api.tm.DeepCopy()
	f.api.tm.Generation = 4 // someone changed the spec meanwhile
	_, err = f.rec.reconcile(t.Context(), f.key, zaptest.NewLogger(t))
	require.Error(t, err)
	assert.True(t, apierrors.IsConflict(err))
	assert.Equal(t, 1, f.api.applies, "one attempt, then the queue")

	f = newFixture(t, inPlace("route stored"))
	f.api.conflicts = 5
	f.api.tm = f.api.tm.DeepCopy()
	f.api.tm.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: metav1.ConditionFalse,
		Reason: string(model.ReasonPublishing), Message: "publisher drain of m-a on worker-a requested; not yet published", ObservedGeneration: 3}}
	_, err = f.rec.reconcile(t.Context(), f.key, zaptest.NewLogger(t))
	require.Error(t, err)
	assert.True(t, apierrors.IsConflict(err))
	assert.Equal(t, 1, f.api.applies, "a condition someone else wrote since the read is not overwritten by the old decision")
}

// A→B→A faster than the TrafficMap informer: the cache still shows status A when the
// sink is back at A, but the live status says B. The writer does not skip the write on the
// strength of that cache, older than its own last status write: the live status ends at A.
// With a cache that caught up, an unchanged status costs no write.
func TestReconcileStatusStaleCache(t *testing.T) {
	s := inPlace("route stored")
	f := newFixture(t, s)
	_, err := f.run(t) // A: Published True, the cache is current
	require.NoError(t, err)
	require.Equal(t, metav1.ConditionTrue, f.published().Status)
	stale := f.inputs.tm.DeepCopy()

	s.conf = model.Confirmation{State: model.Pending, Message: "waiting for gateway prod/g"}
	_, err = f.run(t) // B: Published False
	require.NoError(t, err)
	require.Equal(t, metav1.ConditionFalse, f.published().Status)

	f.inputs.tm = stale // the informer has not delivered B yet
	s.conf = model.Confirmation{State: model.InPlace, Message: "route stored"}
	_, err = f.rec.reconcile(t.Context(), f.key, zaptest.NewLogger(t)) // A again
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, f.published().Status, "the live status is A again, not left at B")

	f.inputs.tm = f.api.tm.DeepCopy() // the cache caught up
	applies := f.api.applies
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, applies, f.api.applies, "a current cache that matches: no write")
}

// A plan one sink refuses (Check) is applied by no sink: the other sink keeps what it
// published, and Published False names the refusing sink with its reason. The refusal is
// the plan's alone: another map's plan is applied and published as usual.
func TestReconcileOneDecision(t *testing.T) {
	refuseMap := func(key string) func(*model.Plan) *model.Confirmation {
		return func(p *model.Plan) *model.Confirmation {
			if p.Key().String() != key {
				return nil
			}
			return &model.Confirmation{State: model.Refused, Reason: model.ReasonRouteRefused,
				Message: "httproute sink cannot publish trafficmap " + key + ": 17 entries, more than 16"}
		}
	}

	t.Run("refused by one sink: no sink applies", func(t *testing.T) {
		route, xds := inPlace("route stored"), inPlace("xds version v1 ACKed by 2/2 clients")
		route.name, xds.name = "httproute", "xds"
		route.refuses = refuseMap("prod/chat")
		f := newFixture(t, route, xds)
		_, err := f.run(t)
		require.NoError(t, err)
		assert.Empty(t, route.applied, "the refusing sink writes nothing")
		assert.Empty(t, xds.applied, "no other sink moves either")
		c := f.published()
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(model.ReasonRouteRefused), c.Reason)
		assert.Equal(t, "httproute sink cannot publish trafficmap prod/chat: 17 entries, more than 16; "+
			"the httproute sink refuses these weights, so no sink publishes them and each keeps what it published before; "+
			"weights worker-a=1, worker-b=1", c.Message)
	})

	t.Run("another map's refusal changes nothing", func(t *testing.T) {
		route, xds := inPlace("route stored"), inPlace("xds version v1 ACKed by 2/2 clients")
		route.name, xds.name = "httproute", "xds"
		route.refuses = refuseMap("prod/other")
		f := newFixture(t, route, xds)
		_, err := f.run(t)
		require.NoError(t, err)
		assert.Len(t, route.applied, 1)
		assert.Len(t, xds.applied, 1)
		c := f.published()
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionTrue, c.Status)
	})
}

// One pipeline that pushes: one reconcile of a map with both sinks enabled plans it once and
// hands the very same plan to both; the sink that serves on every replica is not asked to
// plan or pull anything (it is handed the plan by Apply), and nothing is handed before the
// announce.
func TestReconcilePlansOnceForEverySink(t *testing.T) {
	route := &fakeSink{name: "httproute", conf: model.Confirmation{State: model.InPlace, Message: "route stored"}}
	xds := &servingSink{fakeSink: &fakeSink{name: "xds", conf: model.Confirmation{State: model.InPlace, Message: "xds ACKed"}}}
	f := newFixture(t, route)
	f.rec.sinks = []model.Sink{durableSink{route}, xds}
	plans := 0
	f.rec.planner = func(g model.Gathered) (*model.Planned, error) {
		plans++
		return planMap(f.rec.hosts, g)
	}
	_, err := f.run(t)
	require.NoError(t, err)
	assert.Equal(t, 1, plans, "the change is planned once")
	require.Len(t, route.given, 1)
	require.Len(t, xds.given, 1)
	assert.Same(t, route.given[0], xds.given[0], "both sinks are handed the same plan")
	assert.Empty(t, xds.served, "the leader hands the plan by Apply alone")
	assert.Equal(t, metav1.ConditionTrue, f.published().Status)
}

// A replica that does not lead runs the first floors only: the plan goes to the sinks that
// serve on every replica, nothing is written, no other sink is applied; a plan another sink
// refuses, or that cannot be made, is handed to none; a deleted map is withdrawn.
func TestServeFirstFloorsOnly(t *testing.T) {
	route := &fakeSink{name: "httproute", conf: model.Confirmation{State: model.InPlace}}
	xds := &servingSink{fakeSink: &fakeSink{name: "xds"}}
	f := newFixture(t, route)
	f.rec.sinks = []model.Sink{route, xds}
	require.NoError(t, f.rec.serve(f.key))
	require.Len(t, xds.served["prod/chat"], 1)
	assert.Empty(t, route.given, "no sink is applied")
	assert.Empty(t, xds.given, "no sink is applied")
	assert.Zero(t, f.api.applies, "nothing is written")

	route.refuses = func(*model.Plan) *model.Confirmation {
		return &model.Confirmation{State: model.Refused, Reason: "RouteConflict", Message: "taken"}
	}
	require.NoError(t, f.rec.serve(f.key))
	assert.Len(t, xds.served["prod/chat"], 1, "a refused plan is handed to none: the last one given stays")
	route.refuses = nil

	f.inputs.noSource = true
	require.NoError(t, f.rec.serve(f.key))
	assert.Len(t, xds.served["prod/chat"], 1, "a user error hands nothing")

	f.inputs.tm = nil
	require.NoError(t, f.rec.serve(f.key))
	assert.Equal(t, []string{"prod/chat"}, xds.withdrawn)
	assert.Zero(t, f.api.applies)
}

// durableSink is a fakeSink whose state outlives the publisher (model.Durable).
type durableSink struct{ *fakeSink }

func (durableSink) Durable() {}

// The plan says PublishedBefore only when Published is True at the map's generation and
// every durable sink already carries the plan; with no durable sink nothing records what
// was published before, so it is false.
func TestReconcilePublishedBefore(t *testing.T) {
	published := func(f *fixture, status metav1.ConditionStatus, generation int64) {
		f.inputs.tm.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: status,
			Reason: string(model.ReasonPublished), ObservedGeneration: generation}}
		f.api.tm = f.inputs.tm.DeepCopy()
	}
	tests := []struct {
		name       string
		durable    bool
		carries    bool
		status     metav1.ConditionStatus
		generation int64
		want       bool
	}{
		{"true and the route carries it", true, true, metav1.ConditionTrue, 3, true},
		{"the route holds other weights (drained while down)", true, false, metav1.ConditionTrue, 3, false},
		{"published at an older generation", true, true, metav1.ConditionTrue, 2, false},
		{"not published", true, true, metav1.ConditionFalse, 3, false},
		{"no durable sink", false, true, metav1.ConditionTrue, 3, false},
		{"no condition yet: a new map claims nothing", false, false, "", 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			route := &fakeSink{name: "httproute", carries: tt.carries, conf: model.Confirmation{State: model.InPlace, Message: "route stored"}}
			xds := &fakeSink{name: "xds", carries: true, conf: model.Confirmation{State: model.InPlace, Message: "xds ACKed"}}
			f := newFixture(t, route, xds)
			f.rec.sinks[0] = route
			if tt.durable {
				f.rec.sinks[0] = durableSink{route}
			}
			if tt.status != "" {
				published(f, tt.status, tt.generation)
			}
			_, err := f.run(t)
			require.NoError(t, err)
			require.Len(t, xds.standing, 1)
			assert.Equal(t, tt.want, xds.standing[0].PublishedBefore)
		})
	}
}

// A True condition is kept while only the consumer counts in its message change (clients
// that come and go cost no status write); other news in a True message is written.
func TestReconcileKeepsTrueCounts(t *testing.T) {
	s := &fakeSink{name: "xds", conf: model.Confirmation{State: model.InPlace, Message: "xds version v1 ACKed by 1/1 clients",
		Progress: &model.Progress{Confirmed: 1, Total: 1}}}
	f := newFixture(t, s)
	_, err := f.run(t)
	require.NoError(t, err)
	require.Equal(t, 1, f.api.applies)
	before := *f.published()

	s.conf.Message, s.conf.Progress = "xds version v1 ACKed by 7/7 clients", &model.Progress{Confirmed: 7, Total: 7}
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, 1, f.api.applies, "only the count changed")
	assert.Equal(t, before, *f.published())

	f.inputs.annotations = map[string]string{"ome.io/traffic-drain": `{"m-a":{"cluster":"worker-a","reason":"r"}}`}
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, 2, f.api.applies, "other weights are news")
	assert.Contains(t, f.published().Message, "worker-a=0 (drained by m-a)")
}

// Turning True is decided again when the InferenceService changed after the cache was read
// (a drain patched just after a flip to False): no True about the weights before it.
func TestReconcileSourceNewerThanCache(t *testing.T) {
	f := newFixture(t, inPlace("route stored"))
	f.inputs.tm.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionPublished, Status: metav1.ConditionFalse,
		Reason: string(model.ReasonPublishing), Message: "publisher drain of m-a on worker-a requested; not yet published", ObservedGeneration: 3}}
	f.api.tm = f.inputs.tm.DeepCopy()
	f.inputs.cachedRV, f.inputs.liveRV = "10", "11"
	hold, err := f.run(t)
	require.NoError(t, err)
	assert.Equal(t, sourceRetry, hold)
	assert.Equal(t, metav1.ConditionFalse, f.published().Status, "no True from a cache older than the source")
	assert.Zero(t, f.api.applies)

	f.inputs.cachedRV = "11" // the informer caught up
	_, err = f.run(t)
	require.NoError(t, err)
	assert.Equal(t, metav1.ConditionTrue, f.published().Status)
}

// The worker decides by leading state which floors to run: a replica that does not lead
// hands the plan to the sinks that serve everywhere and writes nothing; while it leads the
// whole pipeline runs. prime serves every key it is given (before the sinks start).
func TestWorkersRunFloorsByLeading(t *testing.T) {
	route := &fakeSink{name: "httproute", conf: model.Confirmation{State: model.InPlace}}
	xds := &servingSink{fakeSink: &fakeSink{name: "xds", conf: model.Confirmation{State: model.InPlace}}}
	f := newFixture(t, route)
	f.rec.sinks = []model.Sink{route, xds}
	w := &workers{log: zaptest.NewLogger(t), queue: newQueue(), rec: f.rec, maps: f.inputs}
	t.Cleanup(w.shutDown)

	w.prime([]cache.ObjectName{f.key})
	require.Len(t, xds.served["prod/chat"], 1, "primed")

	w.add(normalPriority, f.key)
	require.True(t, w.processNext(t.Context()))
	assert.Len(t, xds.served["prod/chat"], 2, "a follower serves the plan")
	assert.Empty(t, route.given, "and applies nothing")
	assert.Zero(t, f.api.applies, "and writes nothing")

	lctx, end := context.WithCancel(t.Context())
	w.lead.Store(&lctx)
	w.add(normalPriority, f.key)
	require.True(t, w.processNext(t.Context()))
	assert.Len(t, route.given, 1, "the leader applies")
	assert.Len(t, xds.given, 1)
	assert.NotZero(t, f.api.applies, "and writes the status")

	end() // the term ended: back to the first floors
	w.add(normalPriority, f.key)
	require.True(t, w.processNext(t.Context()))
	assert.Len(t, route.given, 1)
	assert.Len(t, xds.served["prod/chat"], 3)
}

// A sink's transient failure stalls no other sink: every enabled sink is handed the plan,
// the reconcile fails (and is retried), and no status claims anything about it.
func TestReconcileTransientSinkErrorHandsEverySink(t *testing.T) {
	route := &fakeSink{name: "httproute", err: errors.New("api server unavailable")}
	xds := &fakeSink{name: "xds", conf: model.Confirmation{State: model.InPlace}}
	f := newFixture(t, route, xds)
	_, err := f.run(t)
	require.ErrorContains(t, err, "httproute sink: api server unavailable")
	require.Len(t, xds.given, 1, "the xds sink is handed the plan anyway")
	assert.Same(t, route.given[0], xds.given[0])
	c := f.published()
	assert.True(t, c == nil || c.Status != metav1.ConditionTrue, "nothing is published")
}
