package tmclient

import (
	"context"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/rest"

	omev1beta1 "github.com/trafficmap/publisher/api/v1beta1"
)

// TrafficMapInterface reads and writes TrafficMaps in one namespace. Its
// methods have the signatures of a client-gen typed client.
type TrafficMapInterface interface {
	Create(ctx context.Context, trafficMap *omev1beta1.TrafficMap, opts metav1.CreateOptions) (*omev1beta1.TrafficMap, error)
	Update(ctx context.Context, trafficMap *omev1beta1.TrafficMap, opts metav1.UpdateOptions) (*omev1beta1.TrafficMap, error)
	UpdateStatus(ctx context.Context, trafficMap *omev1beta1.TrafficMap, opts metav1.UpdateOptions) (*omev1beta1.TrafficMap, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*omev1beta1.TrafficMap, error)
	List(ctx context.Context, opts metav1.ListOptions) (*omev1beta1.TrafficMapList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*omev1beta1.TrafficMap, error)
}

var _ TrafficMapInterface = (*gentype.ClientWithList[*omev1beta1.TrafficMap, *omev1beta1.TrafficMapList])(nil)

// Clientset talks to the ome.io/v1beta1 API group. It is safe for concurrent
// use.
type Clientset struct {
	restClient rest.Interface
}

// NewForConfig returns a Clientset for cfg. It copies cfg and sets the group
// version, API path, JSON content type and serializer for ome.io/v1beta1,
// keeping cfg's host, credentials, QPS, Burst and UserAgent; cfg itself is not
// modified.
func NewForConfig(cfg *rest.Config) (*Clientset, error) {
	config := *cfg
	setConfigDefaults(&config)
	httpClient, err := rest.HTTPClientFor(&config)
	if err != nil {
		return nil, fmt.Errorf("building http client for ome.io/v1beta1: %w", err)
	}
	return NewForConfigAndClient(&config, httpClient)
}

// NewForConfigAndClient is NewForConfig with a caller-supplied HTTP client,
// which takes precedence over cfg's transport settings.
func NewForConfigAndClient(cfg *rest.Config, httpClient *http.Client) (*Clientset, error) {
	config := *cfg
	setConfigDefaults(&config)
	restClient, err := rest.RESTClientForConfigAndClient(&config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building rest client for ome.io/v1beta1: %w", err)
	}
	return &Clientset{restClient: restClient}, nil
}

// New returns a Clientset that sends its requests through restClient, which
// must already be configured for ome.io/v1beta1 (for example a fake).
func New(restClient rest.Interface) *Clientset {
	return &Clientset{restClient: restClient}
}

// TrafficMaps returns a client for the TrafficMaps in namespace.
func (c *Clientset) TrafficMaps(namespace string) TrafficMapInterface {
	return gentype.NewClientWithList[*omev1beta1.TrafficMap, *omev1beta1.TrafficMapList](
		omev1beta1.TrafficMapsResource.Resource,
		c.restClient,
		ParameterCodec,
		namespace,
		func() *omev1beta1.TrafficMap { return &omev1beta1.TrafficMap{} },
		func() *omev1beta1.TrafficMapList { return &omev1beta1.TrafficMapList{} },
	)
}

// RESTClient returns the underlying REST client, or nil for a nil Clientset.
func (c *Clientset) RESTClient() rest.Interface {
	if c == nil {
		return nil
	}
	return c.restClient
}

func setConfigDefaults(config *rest.Config) {
	gv := omev1beta1.SchemeGroupVersion
	config.GroupVersion = &gv
	config.APIPath = "/apis"
	config.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(Scheme, Codecs).WithoutConversion()
	// Custom resources are not served as protobuf, and cfg may come from a
	// config tuned for built-in types, so always speak JSON.
	config.ContentType = runtime.ContentTypeJSON
	config.AcceptContentTypes = runtime.ContentTypeJSON
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
}
