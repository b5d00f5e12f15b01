package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/trafficmap/publisher/api/v1beta1"
)

// RequestTimeout bounds each API request.
const RequestTimeout = 10 * time.Second

// Client reads and patches InferenceServices. It never retries.
type Client struct {
	Dynamic dynamic.Interface
	Action  Action // names the command in permission errors
}

// Get reads the target.
func (c Client) Get(ctx context.Context, namespace, name string) (Target, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	u, err := c.Dynamic.Resource(v1beta1.InferenceServicesResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Target{}, c.apiError(ctx, "get", namespace, err)
	}
	if u.GetAPIVersion() != v1beta1.SchemeGroupVersion.String() || u.GetKind() != "InferenceService" ||
		u.GetNamespace() != namespace || u.GetName() != name {
		return Target{}, ErrTargetMismatch
	}
	return TargetOf(u), nil
}

// Apply sends the plan's patch (dryRun=All for a server dry run) and returns the stored
// object's resourceVersion. A failed UID or resourceVersion test is ErrConflict.
func (c Client) Apply(ctx context.Context, p *Plan, dry DryRun) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	opts := metav1.PatchOptions{}
	if dry == DryRunServer {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	u, err := c.Dynamic.Resource(v1beta1.InferenceServicesResource).Namespace(p.Target.Namespace).
		Patch(ctx, p.Target.Name, types.JSONPatchType, p.Patch(), opts)
	if err != nil {
		if isTestFailure(err) {
			return "", ErrConflict
		}
		return "", c.apiError(ctx, "patch", p.Target.Namespace, err)
	}
	return checkResponse(u, p)
}

// checkResponse makes sure the response is the object the patch named.
func checkResponse(u *unstructured.Unstructured, p *Plan) (string, error) {
	if b, err := json.Marshal(u.Object); err != nil || len(b) > MaxPayloadBytes {
		return "", ErrResponseTooLarge
	}
	if u.GetAPIVersion() != v1beta1.SchemeGroupVersion.String() || u.GetKind() != "InferenceService" ||
		u.GetNamespace() != p.Target.Namespace || u.GetName() != p.Target.Name || u.GetUID() != p.Target.UID {
		return "", ErrResponseUnbound
	}
	if !SafeScalar(u.GetResourceVersion()) {
		return "", ErrResponseUnsafe
	}
	return u.GetResourceVersion(), nil
}

// isTestFailure reports a 409 Conflict or the API server's exact 422 for a JSON Patch whose
// test failed.
func isTestFailure(err error) bool {
	if apierrors.IsConflict(err) {
		return true
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	s := st.Status()
	return s.Code == http.StatusUnprocessableEntity && s.Reason == metav1.StatusReasonInvalid && s.Message == jsonPatchTestFailed
}

// jsonPatchTestFailed is the API server's message for a JSON Patch that does not apply, which
// for this patch means a failed test of the UID or resourceVersion.
const jsonPatchTestFailed = "the server rejected our request due to an error in our request"

// apiError turns an API error into a sanitized one. A permission error names the verb and
// the resource and what the command needs; admission text is never echoed.
func (c Client) apiError(ctx context.Context, verb, namespace string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("forbidden: cannot %s inferenceservices.ome.io in namespace %s; the %s needs get and patch on inferenceservices.ome.io and get on trafficmaps.ome.io",
			verb, namespace, c.Action)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return context.DeadlineExceeded
	case errors.Is(ctx.Err(), context.Canceled): // Ctrl-C (SIGINT) while the request ran
		return context.Canceled
	default:
		return ErrAPI
	}
}
