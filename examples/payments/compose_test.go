package main

import (
	"net"
	"net/url"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composePath is the repository's docker-compose.yml, from this package's
// directory.
const composePath = "../../docker-compose.yml"

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

// published maps "host:port" on the host to the container port, for every
// published port of s.
func published(t *testing.T, name string, s composeService) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		if len(parts) != 3 {
			t.Errorf("%s: port %q is not HOST_IP:HOST_PORT:CONTAINER_PORT", name, p)
			continue
		}
		if parts[0] != "127.0.0.1" {
			t.Errorf("%s: port %q is published on %s, want 127.0.0.1 only", name, p, parts[0])
		}
		m[net.JoinHostPort(parts[0], parts[1])] = parts[2]
	}
	return m
}

// hostPort returns the host:port of an endpoint given as a URL or as
// host:port.
func hostPort(t *testing.T, endpoint string) string {
	t.Helper()
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	return endpoint
}

// docker-compose.yml runs the servers examples/payments expects, on the
// ports its defaults name, published on loopback only and documented. No
// Docker engine runs where the tests run, so the file is checked, not run.
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("parsing %s: %v", composePath, err)
	}
	images := map[string]string{
		"dynamodb": "amazon/dynamodb-local:",
		"temporal": "temporalio/temporal:",
		"jaeger":   "jaegertracing/all-in-one:",
		"postgres": "postgres:",
		"redis":    "redis:",
	}
	for name := range f.Services {
		if _, ok := images[name]; !ok {
			t.Errorf("unexpected service %s: add it to this test", name)
		}
	}
	for name, prefix := range images {
		s, ok := f.Services[name]
		if !ok {
			t.Errorf("no service %s", name)
			continue
		}
		tag := strings.TrimPrefix(s.Image, prefix)
		if !strings.HasPrefix(s.Image, prefix) || tag == "" || tag == "latest" {
			t.Errorf("%s: image %q, want %s with a pinned version", name, s.Image, prefix)
		}
	}

	if cmd := strings.Join(f.Services["redis"].Command, " "); !strings.Contains(cmd, "--maxmemory-policy noeviction") {
		t.Errorf("redis: command %q, want --maxmemory-policy noeviction (docs/redis.md)", cmd)
	}

	ddb, tmp, jaeger := f.Services["dynamodb"], f.Services["temporal"], f.Services["jaeger"]
	if cmd := strings.Join(ddb.Command, " "); !strings.Contains(cmd, "-jar DynamoDBLocal.jar") || !strings.Contains(cmd, "-inMemory") || !strings.Contains(cmd, "-sharedDb") {
		t.Errorf("dynamodb: command %q, want DynamoDBLocal.jar -inMemory -sharedDb", cmd)
	}
	if cmd := strings.Join(tmp.Command, " "); !strings.HasPrefix(cmd, "server start-dev") || !strings.Contains(cmd, "--ip 0.0.0.0") {
		t.Errorf("temporal: command %q, want server start-dev --ip 0.0.0.0 (the image's entrypoint is the temporal CLI)", cmd)
	}
	if jaeger.Environment["COLLECTOR_OTLP_ENABLED"] != "true" {
		t.Errorf("jaeger: COLLECTOR_OTLP_ENABLED = %q, want true", jaeger.Environment["COLLECTOR_OTLP_ENABLED"])
	}

	ports := map[string]map[string]string{} // service -> host:port -> container port
	for name, s := range f.Services {
		ports[name] = published(t, name, s)
	}

	// The example's defaults reach the right container ports: DynamoDB
	// Local listens on 8000, the dev server's frontend on 7233, Jaeger's
	// OTLP/gRPC receiver on 4317 and its UI on 16686.
	for _, c := range []struct {
		service, endpoint, containerPort string
	}{
		{"dynamodb", DefaultDynamoDBEndpoint, "8000"},
		{"temporal", DefaultTemporalAddress, "7233"},
		{"jaeger", DefaultOTLPEndpoint, "4317"},
		{"jaeger", DefaultJaegerUI, "16686"},
		{"postgres", "127.0.0.1:5432", "5432"}, // the URL docs/postgres.md gives
	} {
		hp := hostPort(t, c.endpoint)
		if got, ok := ports[c.service][hp]; !ok || got != c.containerPort {
			t.Errorf("%s: the example's default %s is not published to container port %s (published: %v)", c.service, c.endpoint, c.containerPort, ports[c.service])
		}
	}

	// Every published port has a comment saying what it is.
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	services := mapValue(doc.Content[0], "services")
	for i := 0; services != nil && i+1 < len(services.Content); i += 2 {
		name := services.Content[i].Value
		ports := mapValue(services.Content[i+1], "ports")
		if ports == nil {
			t.Errorf("%s publishes no ports", name)
			continue
		}
		for _, p := range ports.Content {
			if strings.TrimSpace(strings.TrimPrefix(p.LineComment, "#")) == "" {
				t.Errorf("%s: port %s has no comment saying what it is", name, p.Value)
			}
		}
	}
}

// mapValue returns the value of key in the mapping node m, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
