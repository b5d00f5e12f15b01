package drain

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	ktesting "k8s.io/client-go/testing"

	"github.com/trafficmap/publisher/api/v1beta1"
)

func seedObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
		"metadata": map[string]any{"name": "chat", "namespace": "prod", "uid": "u-1", "resourceVersion": "7", "generation": int64(1)},
		"spec":     map[string]any{"placement": map[string]any{"mode": "All"}},
	}}
	return u
}

func fakeClient(t *testing.T, patchErr error) (Client, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	scheme := runtime.NewScheme()
	fake := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{v1beta1.InferenceServicesResource: "InferenceServiceList"}, seedObject())
	if patchErr != nil {
		fake.PrependReactor("patch", "inferenceservices", func(ktesting.Action) (bool, runtime.Object, error) { return true, nil, patchErr })
	}
	return Client{Dynamic: fake, Action: ActionDrain}, fake
}

func TestClientGetAndApply(t *testing.T) {
	c, fake := fakeClient(t, nil)
	tg, err := c.Get(context.Background(), "prod", "chat")
	require.NoError(t, err)
	assert.Equal(t, "7", tg.ResourceVersion)
	assert.True(t, tg.Placement)
	p, err := Prepare(seedDrain, tg)
	require.NoError(t, err)

	_, err = c.Apply(context.Background(), p, DryRunServer)
	require.NoError(t, err)
	last := fake.Actions()[len(fake.Actions())-1].(ktesting.PatchAction)
	assert.Equal(t, "application/merge-patch+json", string(last.GetPatchType()))
	assert.Equal(t, p.Patch(), last.GetPatch())
}

func TestClientErrors(t *testing.T) {
	gr := schema.GroupResource{Group: "ome.io", Resource: "inferenceservices"}
	gk := schema.GroupKind{Group: "ome.io", Kind: "InferenceService"}
	// What kube-apiserver answers (see isConflict and integration/ops_test.go).
	jsonPatchFailed := apierrors.NewGenericServerResponse(422, "", schema.GroupResource{}, "", "", 0, false)
	uidChanged := apierrors.NewInvalid(gk, "chat", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "u-2", "field is immutable")})
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"stale resourceVersion", apierrors.NewConflict(gr, "chat", errors.New("the object has been modified")), ErrConflict.Error()},
		{"uid changed at the same resourceVersion", uidChanged, ErrConflict.Error()},
		{"a 422 without the uid cause is no conflict", jsonPatchFailed, ErrAPI.Error()},
		{"another immutable field is no conflict", apierrors.NewInvalid(gk, "chat",
			field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), "x", "field is immutable")}), ErrAPI.Error()},
		{"forbidden", apierrors.NewForbidden(gr, "chat", errors.New("no")),
			"forbidden: cannot patch inferenceservices.ome.io in namespace prod; the drain needs get and patch on inferenceservices.ome.io and get on trafficmaps.ome.io"},
		{"admission text is not echoed", apierrors.NewBadRequest("webhook says secret-stuff"), ErrAPI.Error()},
		{"other invalid", apierrors.NewInvalid(gk, "chat", nil), ErrAPI.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := fakeClient(t, tc.err)
			tg, err := c.Get(context.Background(), "prod", "chat")
			require.NoError(t, err)
			p, err := Prepare(seedDrain, tg)
			require.NoError(t, err)
			_, err = c.Apply(context.Background(), p, DryRunNone)
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}

func TestCheckResponse(t *testing.T) {
	tg := TargetOf(seedObject())
	p, err := Prepare(seedDrain, tg)
	require.NoError(t, err)
	other := seedObject()
	other.SetUID("u-2")
	_, err = checkResponse(other, p)
	assert.ErrorIs(t, err, ErrResponseUnbound)
	unsafe := seedObject()
	unsafe.SetResourceVersion("7 8")
	_, err = checkResponse(unsafe, p)
	assert.ErrorIs(t, err, ErrResponseUnsafe)
	big := seedObject()
	big.Object["spec"] = map[string]any{"blob": string(make([]byte, MaxPayloadBytes))}
	_, err = checkResponse(big, p)
	assert.ErrorIs(t, err, ErrResponseTooLarge)
	rv, err := checkResponse(seedObject(), p)
	require.NoError(t, err)
	assert.Equal(t, "7", rv)
}
