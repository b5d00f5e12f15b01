package tmclient_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/trafficmap/publisher/api/tmclient"
	omev1beta1 "github.com/trafficmap/publisher/api/v1beta1"
)

type request struct {
	method, path, query, contentType, userAgent, body string
}

// fakeServer answers every request with obj (or a list of it) and records the requests.
type fakeServer struct {
	mu       sync.Mutex
	requests []request
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, request{
		method: r.Method, path: r.URL.Path, query: r.URL.RawQuery,
		contentType: r.Header.Get("Content-Type"), userAgent: r.UserAgent(), body: string(body),
	})
	f.mu.Unlock()

	tm := omev1beta1.TrafficMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "ome.io/v1beta1", Kind: "TrafficMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "llama", Namespace: "models", ResourceVersion: "7"},
		Spec:       omev1beta1.TrafficMapSpec{Service: "llama", Entries: []omev1beta1.TrafficMapEntry{{Cluster: "east", Weight: 3}}},
	}
	var out any = &tm
	switch {
	case r.Method == http.MethodDelete:
		out = &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusSuccess}
	case r.Method == http.MethodGet && r.URL.Path == "/apis/ome.io/v1beta1/namespaces/models/trafficmaps":
		out = &omev1beta1.TrafficMapList{
			TypeMeta: metav1.TypeMeta{APIVersion: "ome.io/v1beta1", Kind: "TrafficMapList"},
			Items:    []omev1beta1.TrafficMap{tm},
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (f *fakeServer) last(t *testing.T) request {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.requests)
	return f.requests[len(f.requests)-1]
}

func newClient(t *testing.T) (*tmclient.Clientset, *fakeServer) {
	t.Helper()
	fake := &fakeServer{}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)

	cfg := &rest.Config{
		Host:          srv.URL,
		QPS:           123,
		Burst:         7,
		UserAgent:     "tmclient-test",
		ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"},
	}
	cs, err := tmclient.NewForConfig(cfg)
	require.NoError(t, err)
	// The caller's config is copied, not modified.
	assert.Nil(t, cfg.GroupVersion)
	assert.Empty(t, cfg.APIPath)
	assert.Equal(t, "application/vnd.kubernetes.protobuf", cfg.ContentType)
	return cs, fake
}

func TestNewForConfigKeepsRateLimits(t *testing.T) {
	cs, _ := newClient(t)
	rc, ok := cs.RESTClient().(*rest.RESTClient)
	require.True(t, ok)
	require.NotNil(t, rc.GetRateLimiter())
	assert.InDelta(t, 123, rc.GetRateLimiter().QPS(), 0)
	assert.Nil(t, (*tmclient.Clientset)(nil).RESTClient())
}

func TestTrafficMapRequests(t *testing.T) {
	ctx := t.Context()
	cs, fake := newClient(t)
	maps := cs.TrafficMaps("models")
	const base = "/apis/ome.io/v1beta1/namespaces/models/trafficmaps"

	got, err := maps.Get(ctx, "llama", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "llama", got.Name)
	assert.Equal(t, int32(3), got.Spec.Entries[0].Weight)
	req := fake.last(t)
	assert.Equal(t, request{method: http.MethodGet, path: base + "/llama", userAgent: "tmclient-test"}, req)

	list, err := maps.List(ctx, metav1.ListOptions{LabelSelector: "app=x"})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	req = fake.last(t)
	assert.Equal(t, base, req.path)
	assert.Equal(t, "labelSelector=app%3Dx", req.query)

	_, err = maps.UpdateStatus(ctx, got, metav1.UpdateOptions{FieldManager: "pub"})
	require.NoError(t, err)
	req = fake.last(t)
	assert.Equal(t, http.MethodPut, req.method)
	assert.Equal(t, base+"/llama/status", req.path)
	assert.Equal(t, "fieldManager=pub", req.query)
	assert.Equal(t, "application/json", req.contentType, "custom resources must be sent as JSON")
	assert.Contains(t, req.body, `"service":"llama"`)

	_, err = maps.Patch(ctx, "llama", types.MergePatchType, []byte(`{"status":{"published":true}}`), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	req = fake.last(t)
	assert.Equal(t, http.MethodPatch, req.method)
	assert.Equal(t, base+"/llama/status", req.path)
	assert.Equal(t, string(types.MergePatchType), req.contentType)

	_, err = maps.Create(ctx, got, metav1.CreateOptions{})
	require.NoError(t, err)
	req = fake.last(t)
	assert.Equal(t, http.MethodPost, req.method)
	assert.Equal(t, base, req.path)

	require.NoError(t, maps.Delete(ctx, "llama", metav1.DeleteOptions{}))
	req = fake.last(t)
	assert.Equal(t, http.MethodDelete, req.method)
	assert.Equal(t, base+"/llama", req.path)
}
