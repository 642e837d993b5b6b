package clustertier

// The part of kustomize that deploy/kubernetes/kustomization.yaml uses,
// modelled in Go over go.yaml.in/yaml/v3 nodes (kustomize's own Go
// module, sigs.k8s.io/kustomize/api, would bring a large dependency tree
// for one file): resources, a configMapGenerator without name hashes, and
// replacements from its data into scalar fields. As in kustomize, a
// replaced scalar keeps its type (completions stays an integer, an env
// value a string), and objects annotated config.kubernetes.io/local-config
// are dropped from the output. Anything else in the file fails the
// decoding (strict), so the model cannot silently ignore a feature it
// lacks. Where kubectl is installed, TestKustomizeAgreesWithKubectl
// compares this rendering with kubectl kustomize's.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// kustomization is the subset of kustomize's Kustomization the model
// knows.
type kustomization struct {
	APIVersion         string   `yaml:"apiVersion"`
	Kind               string   `yaml:"kind"`
	Resources          []string `yaml:"resources"`
	ConfigMapGenerator []struct {
		Name     string   `yaml:"name"`
		Literals []string `yaml:"literals"`
		Options  struct {
			DisableNameSuffixHash bool              `yaml:"disableNameSuffixHash"`
			Annotations           map[string]string `yaml:"annotations"`
		} `yaml:"options"`
	} `yaml:"configMapGenerator"`
	Replacements []struct {
		Source struct {
			Kind      string `yaml:"kind"`
			Name      string `yaml:"name"`
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"source"`
		Targets []struct {
			Select struct {
				Kind string `yaml:"kind"`
				Name string `yaml:"name"`
			} `yaml:"select"`
			FieldPaths []string `yaml:"fieldPaths"`
		} `yaml:"targets"`
	} `yaml:"replacements"`
}

const localConfig = "config.kubernetes.io/local-config"

// render builds the kustomization kust (the text of a kustomization.yaml)
// whose resources are in dir, and returns the objects as JSON, in order.
func render(dir string, kust []byte) ([][]byte, error) {
	var k kustomization
	dec := yaml.NewDecoder(bytes.NewReader(kust))
	dec.KnownFields(true)
	if err := dec.Decode(&k); err != nil {
		return nil, fmt.Errorf("kustomization: %w (a field this model does not know?)", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return nil, fmt.Errorf("kustomization: apiVersion %q kind %q", k.APIVersion, k.Kind)
	}
	var objs []*yaml.Node
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			return nil, err
		}
		docs, err := readYAMLObjects(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
		objs = append(objs, docs...)
	}
	for _, g := range k.ConfigMapGenerator {
		if !g.Options.DisableNameSuffixHash {
			return nil, fmt.Errorf("configMapGenerator %s: the model has no name hashes: set disableNameSuffixHash", g.Name)
		}
		cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}
		meta := map[string]any{"name": g.Name}
		if len(g.Options.Annotations) > 0 {
			meta["annotations"] = g.Options.Annotations
		}
		data := map[string]string{}
		for _, l := range g.Literals {
			key, val, ok := strings.Cut(l, "=")
			if !ok {
				return nil, fmt.Errorf("configMapGenerator %s: literal %q: want KEY=VALUE", g.Name, l)
			}
			data[key] = val
		}
		cm["metadata"], cm["data"] = meta, data
		var n yaml.Node
		if err := n.Encode(cm); err != nil {
			return nil, err
		}
		objs = append(objs, &n)
	}
	for _, r := range k.Replacements {
		src, err := selectOne(objs, r.Source.Kind, r.Source.Name)
		if err != nil {
			return nil, fmt.Errorf("replacement source: %w", err)
		}
		v, err := lookup(src, r.Source.FieldPath)
		if err != nil {
			return nil, fmt.Errorf("replacement source %s %s: %w", r.Source.Kind, r.Source.Name, err)
		}
		if v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("replacement source %s: not a scalar", r.Source.FieldPath)
		}
		for _, t := range r.Targets {
			for _, o := range objs {
				if !selected(o, t.Select.Kind, t.Select.Name) {
					continue
				}
				for _, fp := range t.FieldPaths {
					f, err := lookup(o, fp)
					if err != nil {
						return nil, fmt.Errorf("replacement target %s %s: %w", t.Select.Kind, t.Select.Name, err)
					}
					if f.Kind != yaml.ScalarNode {
						return nil, fmt.Errorf("replacement target %s: not a scalar", fp)
					}
					f.Value = v.Value // the tag stays: an int stays an int
				}
			}
		}
	}
	out := objs[:0]
	for _, o := range objs {
		if a, _ := lookup(o, "metadata.annotations"); a != nil {
			if v := field(a, localConfig); v != nil && v.Value == "true" {
				continue
			}
		}
		out = append(out, o)
	}
	return toJSON(out)
}

// toJSON is objects as JSON.
func toJSON(objs []*yaml.Node) ([][]byte, error) {
	var out [][]byte
	for _, o := range objs {
		var v any
		if err := o.Decode(&v); err != nil {
			return nil, err
		}
		j, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// readYAMLObjects decodes the non-empty documents of a YAML stream.
func readYAMLObjects(data []byte) ([]*yaml.Node, error) {
	var objs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
			objs = append(objs, doc.Content[0])
		} else if len(doc.Content) > 0 && doc.Content[0].Tag != "!!null" {
			return nil, fmt.Errorf("line %d: a document that is not an object", doc.Line)
		}
	}
}

// yamlJSON is YAML text's objects as JSON, for output that did not go
// through render (kubectl kustomize's).
func yamlJSON(data []byte) ([][]byte, error) {
	objs, err := readYAMLObjects(data)
	if err != nil {
		return nil, err
	}
	return toJSON(objs)
}

func selected(o *yaml.Node, kind, name string) bool {
	k, _ := lookup(o, "kind")
	n, _ := lookup(o, "metadata.name")
	return k != nil && n != nil && (kind == "" || k.Value == kind) && (name == "" || n.Value == name)
}

func selectOne(objs []*yaml.Node, kind, name string) (*yaml.Node, error) {
	var found *yaml.Node
	for _, o := range objs {
		if selected(o, kind, name) {
			if found != nil {
				return nil, fmt.Errorf("more than one %s %s", kind, name)
			}
			found = o
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no %s %s", kind, name)
	}
	return found, nil
}

// lookup follows a kustomize field path: names separated by dots, and
// [key=value] to pick the element of a list whose key has that value.
// A missing field is an error (kustomize leaves such a target alone; here
// it is a mistake in the kustomization).
func lookup(n *yaml.Node, path string) (*yaml.Node, error) {
	for seg := range strings.SplitSeq(path, ".") {
		if strings.HasPrefix(seg, "[") && strings.HasSuffix(seg, "]") {
			key, val, _ := strings.Cut(seg[1:len(seg)-1], "=")
			if n.Kind != yaml.SequenceNode {
				return nil, fmt.Errorf("%s: %s is not a list", path, seg)
			}
			var next *yaml.Node
			for _, e := range n.Content {
				if f, _ := lookup(e, key); f != nil && f.Value == val {
					next = e
					break
				}
			}
			if next == nil {
				return nil, fmt.Errorf("%s: no element %s", path, seg)
			}
			n = next
			continue
		}
		next := field(n, seg)
		if next == nil {
			return nil, fmt.Errorf("%s: no field %s", path, seg)
		}
		n = next
	}
	return n, nil
}

// field is the value of key in mapping n; nil if n is not a mapping or
// has no such key.
func field(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
