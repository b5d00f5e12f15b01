package lease

import (
	"github.com/trafficmap/publisher/model/replicas"

	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// held reads the report the Lease holds.
func held(t require.TestingT, kube *kubefake.Clientset, name string) replicas.Report {
	l, err := kube.CoordinationV1().Leases("ns").Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	r, err := replicas.Decode(l.Annotations[replicas.Annotation])
	require.NoError(t, err)
	return r
}

// Issue 25, item 2: report A is written; the write of B lands but reports an error (a
// timeout after the API server applied it); the content goes back to A. The Lease must
// not keep B while the writer takes A for written: the Writer writes A again at once (on
// main it compared A with the last write it saw succeed, A, and left B in place until the
// next renewal), with a higher Seq than B's.
func TestWriterRewritesAfterAFailedWriteThatLanded(t *testing.T) {
	kube := kubefake.NewClientset()
	a := replicas.Report{Maps: []replicas.Map{{Key: "prod/chat", Digest: "d1", Relevant: 1}}}
	b := replicas.Report{Maps: []replicas.Map{{Key: "prod/chat", Digest: "d1", Relevant: 1, Acked: 1}}}
	var content atomic.Pointer[replicas.Report]
	content.Store(&a)
	w := &Writer{Kube: kube, Namespace: "ns", Election: "publisher", Identity: "pub-b", Duration: time.Hour,
		Build: func() replicas.Report { return *content.Load() }, FieldManager: "test", Log: zaptest.NewLogger(t)}
	name := replicas.LeaseName("publisher", "pub-b")
	require.NoError(t, w.First(context.Background()))
	first := held(t, kube, name)
	assert.Equal(t, a.Maps, first.Maps)

	var landed atomic.Bool
	kube.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if landed.Load() {
			return false, nil, nil
		}
		obj := action.(k8stesting.UpdateAction).GetObject()
		require.NoError(t, kube.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"), obj, "ns"))
		landed.Store(true)
		content.Store(&a) // back to A before the writer hears of B's fate
		return true, nil, errors.New("the request timed out")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	content.Store(&b)
	require.Eventually(t, landed.Load, 10*time.Second, time.Millisecond, "B landed")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, a.Maps, held(c, kube, name).Maps, "the Lease holds A again")
	}, 10*time.Second, 10*time.Millisecond)
	assert.Greater(t, held(t, kube, name).Seq, first.Seq+1, "above B's, which took the Seq after the first")
}

// A replica whose report is not renewed fences itself before the leader could expire the
// report (FenceAfter, two thirds of the duration), and unfences once a write lands; a
// first write that fails fences at once.
func TestWriterFencesWhileNotRenewed(t *testing.T) {
	kube := kubefake.NewClientset()
	var broken atomic.Bool
	kube.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if broken.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	var mu sync.Mutex
	var events []string
	fenced := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) > 0 && events[len(events)-1] != "unfence"
	}
	const d = 1500 * time.Millisecond
	assert.Less(t, FenceAfter(d), d, "fenced before the leader could expire the report")
	assert.Less(t, FenceAfter(15*time.Second), 15*time.Second)
	w := &Writer{Kube: kube, Namespace: "ns", Election: "publisher", Identity: "pub-b", Duration: d,
		Build: func() replicas.Report { return replicas.Report{} }, FieldManager: "test", Log: zaptest.NewLogger(t),
		Fence: func(reason string) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, reason)
		},
		Unfence: func() {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, "unfence")
		}}
	broken.Store(true)
	require.Error(t, w.First(context.Background()))
	require.True(t, fenced(), "a replica whose first report failed serves nothing")
	assert.Contains(t, events[0], "replica pub-b has not renewed its report since its start")

	broken.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { return !fenced() }, 10*time.Second, time.Millisecond, "unfenced once written")

	broken.Store(true)
	require.Eventually(t, fenced, 10*time.Second, time.Millisecond, "fenced while not renewed")
	broken.Store(false)
	require.Eventually(t, func() bool { return !fenced() }, 10*time.Second, time.Millisecond, "unfenced once renewed")
	mu.Lock()
	assert.Len(t, events, 4, "%q", events)
	mu.Unlock()
}

// The Board takes a report for the current one only when it is newer than the one it has
// of that Lease (higher Seq); a report of a Lease created anew counts whatever its Seq.
func TestBoardKeepsTheNewestReport(t *testing.T) {
	var requeued [][]string
	b := NewBoard(kubefake.NewClientset(), "ns", "publisher", "pub-a", func(keys []string) { requeued = append(requeued, keys) }, zaptest.NewLogger(t))
	lease := func(uid, rv string, r replicas.Report) *coordinationv1.Lease {
		v, err := replicas.Encode(r)
		require.NoError(t, err)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "publisher-xds-b", Namespace: "ns", UID: types.UID(uid), ResourceVersion: rv,
			Annotations: map[string]string{replicas.Annotation: v}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pub-b"), LeaseDurationSeconds: ptr.To(int32(15))}}
	}
	waiting := replicas.Report{Identity: "pub-b", Seq: 7, Maps: []replicas.Map{{Key: "prod/chat", Digest: "d1", Relevant: 1}}}
	acked := replicas.Report{Identity: "pub-b", Seq: 6, Maps: []replicas.Map{{Key: "prod/chat", Digest: "d1", Relevant: 1, Acked: 1}}}
	b.observe(lease("u1", "10", waiting))
	b.observe(lease("u1", "11", acked)) // an older report written after: not the current one
	require.Len(t, b.Peers(), 1)
	assert.Equal(t, uint64(7), b.Peers()[0].Seq)
	assert.False(t, replicas.Judge(b.Peers(), "prod/chat", "d1", false).Done)

	acked.Seq = 8
	b.observe(lease("u1", "12", acked))
	assert.Equal(t, uint64(8), b.Peers()[0].Seq)
	assert.True(t, replicas.Judge(b.Peers(), "prod/chat", "d1", false).Done)

	fresh := replicas.Report{Identity: "pub-b", Seq: 1}
	b.observe(lease("u2", "20", fresh)) // the Lease deleted and created again
	assert.Equal(t, uint64(1), b.Peers()[0].Seq)
	assert.Equal(t, [][]string{{"prod/chat"}, {"prod/chat"}, {"prod/chat"}}, requeued)
}

// OnArrived gets the clients another replica's report newly lists as arrived there
// (replicas.Report.Arrived), not those it listed before, nor this replica's own.
func TestBoardTellsArrivals(t *testing.T) {
	var arrived [][]string
	b := NewBoard(kubefake.NewClientset(), "ns", "publisher", "pub-a", func([]string) {}, zaptest.NewLogger(t))
	b.OnArrived = func(tags []string) { arrived = append(arrived, tags) }
	lease := func(name, holder, rv string, r replicas.Report) *coordinationv1.Lease {
		v, err := replicas.Encode(r)
		require.NoError(t, err)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "u", ResourceVersion: rv,
			Annotations: map[string]string{replicas.Annotation: v}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(15))}}
	}
	one, two := replicas.ClientTag("", "envoy-1"), replicas.ClientTag("", "envoy-2")
	b.observe(lease("publisher-xds-b", "pub-b", "1", replicas.Report{Identity: "pub-b", Seq: 1, Arrived: []string{one}}))
	b.observe(lease("publisher-xds-b", "pub-b", "2", replicas.Report{Identity: "pub-b", Seq: 2, Arrived: []string{one, two}}))
	b.observe(lease("publisher-xds-b", "pub-b", "3", replicas.Report{Identity: "pub-b", Seq: 3, Arrived: []string{two}}))
	b.observe(lease("publisher-xds-a", "pub-a", "4", replicas.Report{Identity: "pub-a", Seq: 1, Arrived: []string{replicas.ClientTag("", "envoy-3")}}))
	assert.Equal(t, [][]string{{one}, {two}}, arrived)
}

// A report that stops being renewed while its replica had clients (a frozen replica cannot
// fence itself) still counts for Grace, judged by its last content and marked Silent; one
// without clients stops counting at expiry. Each step requeues what the report listed,
// OnExpire is called once, when it stops counting, and OnBack when it is renewed again.
func TestBoardCountsASilentReportForTheGrace(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var requeued [][]string
	var left []string
	b := NewBoard(kubefake.NewClientset(), "ns", "publisher", "pub-a", func(keys []string) { requeued = append(requeued, keys) }, zaptest.NewLogger(t))
	b.now, b.Grace = func() time.Time { return now }, 30*time.Second
	b.OnExpire = func(id string) { left = append(left, id) }
	var back []string
	b.OnBack = func(id string) { back = append(back, id) }
	lease := func(name, holder string, r replicas.Report) *coordinationv1.Lease {
		v, err := replicas.Encode(r)
		require.NoError(t, err)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "u", ResourceVersion: "1",
			Annotations: map[string]string{replicas.Annotation: v}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(4))}}
	}
	b.observe(lease("publisher-xds-b", "pub-b", replicas.Report{Identity: "pub-b", Seq: 1, Clients: 2,
		Maps: []replicas.Map{{Key: "prod/chat", Digest: "d1", Relevant: 2, Acked: 2}}}))
	b.observe(lease("publisher-xds-c", "pub-c", replicas.Report{Identity: "pub-c", Seq: 1}))
	require.Len(t, b.Peers(), 2)
	requeued = nil

	now = now.Add(4 * time.Second) // both expire: b had clients, c none
	b.expire()
	peers := b.Peers()
	require.Len(t, peers, 1, "c stops counting, b is silent")
	assert.Equal(t, "pub-b", peers[0].Identity)
	require.NotNil(t, peers[0].Silent)
	assert.Equal(t, now, peers[0].Silent.Since)
	assert.Equal(t, now.Add(30*time.Second), peers[0].Silent.Until)
	assert.Equal(t, []string{"pub-c"}, left)
	assert.Equal(t, [][]string{{"prod/chat"}}, requeued, "b's listed maps, judged again with its silence")
	v := replicas.Judge(peers, "prod/new", "d9", false)
	assert.False(t, v.Done, "a map b never saw is held while b's clients may hold older content")
	assert.Contains(t, v.Message, "replica pub-b has not reported on it yet (its report expired at 2026-12-04T12:00:04Z")
	reps := b.Replicas()
	require.Len(t, reps, 2)
	assert.Equal(t, []bool{false, true}, []bool{reps[0].Live, reps[0].Counted}, "b: silent")
	assert.Equal(t, []bool{false, false}, []bool{reps[1].Live, reps[1].Counted}, "c: gone")

	now = now.Add(30 * time.Second) // the grace ends
	b.expire()
	b.expire()
	assert.Empty(t, b.Peers())
	assert.Equal(t, []string{"pub-c", "pub-b"}, left, "OnExpire once per replica")
	assert.Equal(t, [][]string{{"prod/chat"}, {"prod/chat"}}, requeued)

	// b renews (it resumed): it counts again as live, and what it lists is judged again.
	l := lease("publisher-xds-b", "pub-b", replicas.Report{Identity: "pub-b", Seq: 2, Clients: 2,
		Maps: []replicas.Map{{Key: "prod/chat", Digest: "d2", Relevant: 2, Acked: 0}}})
	l.ResourceVersion = "2"
	b.observe(l)
	require.Len(t, b.Peers(), 1)
	assert.Nil(t, b.Peers()[0].Silent)
	assert.Equal(t, [][]string{{"prod/chat"}, {"prod/chat"}, {"prod/chat"}}, requeued)
	assert.Equal(t, []string{"pub-b"}, back, "the clients it fenced or lost reconnect")

	b.forget("publisher-xds-b") // a clean stop deletes the report: it stops counting at once
	assert.Empty(t, b.Peers())
	assert.Equal(t, []string{"pub-c", "pub-b", "pub-b"}, left, "OnExpire for the deleted report too")
}
