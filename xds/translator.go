package xds

// Translator translates services into both flavours and validates each service on its own,
// reusing what it built for every service whose content is unchanged since the previous
// call, so one drain re-translates one service, not the fleet. Its output is the same as
// TranslateEnvoy's, TranslateGRPC's and Partition's. It is not safe for concurrent use.
type Translator struct {
	opts  EnvoyOptions
	cache map[string]*translated // by service key
	seen  map[string]bool        // keys used since the last Prune
}

// translated is what one service's content translates to.
type translated struct {
	content string // what the entry was built from (see contentKey)
	valid   error  // Partition's verdict
	envoy   *envoyPart
	envoyOK error
	grpc    *Resources
	grpcOK  error
}

// NewTranslator returns a Translator for the Envoy flavour shaped by opts.
func NewTranslator(opts EnvoyOptions) *Translator {
	return &Translator{opts: opts, cache: map[string]*translated{}, seen: map[string]bool{}}
}

// contentKey is everything about s that its resources are built from: the content digest
// (which covers spec.service, the gRPC listener name) and, with no positive weight, the
// fixed response body.
func contentKey(s Service) string {
	k := s.Digest()
	if s.Result.TotalEffective() <= 0 {
		k += "\x00" + noRouteReason(s.Result)
	}
	return k
}

func (t *Translator) entry(s Service) *translated {
	key := s.key()
	t.seen[key] = true
	content := contentKey(s)
	e := t.cache[key]
	if e == nil || e.content != content {
		e = &translated{content: content, valid: validService(t.opts, s)}
		t.cache[key] = e
	}
	return e
}

// Partition is Partition(opts, services), with each service's verdict reused while its
// content is unchanged.
func (t *Translator) Partition(services []Service) (valid []Service, invalid map[string]error) {
	invalid = map[string]error{}
	for _, s := range services {
		if err := t.entry(s).valid; err != nil {
			invalid[s.Key()] = err
			continue
		}
		valid = append(valid, s)
	}
	return valid, invalid
}

// Validate is Partition's verdict on one service, reused while its content is unchanged.
func (t *Translator) Validate(s Service) error { return t.entry(s).valid }

// Envoy is TranslateEnvoy(opts, services).
func (t *Translator) Envoy(services []Service) (Resources, error) {
	parts := make([]envoyPart, 0, len(services))
	for _, s := range sortedServices(services) {
		e := t.entry(s)
		if e.envoy == nil && e.envoyOK == nil {
			part, err := translateEnvoyService(s)
			e.envoy, e.envoyOK = &part, err
		}
		if e.envoyOK != nil {
			return Resources{}, e.envoyOK
		}
		parts = append(parts, *e.envoy)
	}
	return assembleEnvoy(t.opts, parts)
}

// GRPC is TranslateGRPC(services).
func (t *Translator) GRPC(services []Service) (Resources, error) {
	parts := make([]Resources, 0, len(services))
	for _, s := range sortedServices(services) {
		e := t.entry(s)
		if e.grpc == nil && e.grpcOK == nil {
			part, err := translateGRPCService(s)
			e.grpc, e.grpcOK = &part, err
		}
		if e.grpcOK != nil {
			return Resources{}, e.grpcOK
		}
		parts = append(parts, *e.grpc)
	}
	return assembleGRPC(parts), nil
}

// Prune forgets the services not used since the previous Prune.
func (t *Translator) Prune() {
	for key := range t.cache {
		if !t.seen[key] {
			delete(t.cache, key)
		}
	}
	t.seen = map[string]bool{}
}
