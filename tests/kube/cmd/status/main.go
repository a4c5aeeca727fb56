// Command steward-status reads an object's status with the real libraries
// of the tools that consume it, so the tests check what Flux, kpt and Argo CD
// would report rather than a copy of their rules:
//
//	steward-status kstatus < OBJECT
//	    sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute, which Flux's
//	    health checks and kpt use.
//	steward-status argo-health --lua FILE < OBJECT
//	    an Argo CD Lua health check, run with gopher-lua in the environment
//	    Argo CD gives a script from argocd-cm (see runHealthLua).
//	steward-status argo-health-tests [--docs FILE] DIR
//	    every health.lua under DIR against its health_test.yaml, the layout
//	    and comparison of Argo CD's own health test harness; with --docs,
//	    also the argocd-cm snippet for the same group and kind in FILE.
//
// OBJECT is one Kubernetes object, JSON or YAML, on stdin. The first two
// print {"status": ..., "message": ...} as JSON; the third prints one line
// per case and exits non-zero if any case fails or none was found.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	luajson "layeh.com/gopher-json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

// Reading is what a consumer makes of an object.
type Reading struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: steward-status kstatus | argo-health --lua FILE | argo-health-tests [--docs FILE] DIR"))
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "kstatus":
		err = kstatusCmd(args)
	case "argo-health":
		err = argoHealthCmd(args)
	case "argo-health-tests":
		err = argoHealthTestsCmd(args)
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "steward-status:", err)
	os.Exit(1)
}

// readObject reads one object from stdin and decodes it as client-go
// decodes what the API server sends (integers as int64), which is the form
// both Flux's status readers and Argo CD's cluster cache hand on.
func readObject() (*unstructured.Unstructured, error) {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("stdin is not JSON or YAML: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		return nil, fmt.Errorf("stdin is not a Kubernetes object: %w", err)
	}
	return u, nil
}

func printReading(r Reading) error {
	return json.NewEncoder(os.Stdout).Encode(r)
}

func kstatusCmd(args []string) error {
	if len(args) != 0 {
		return fmt.Errorf("kstatus takes no arguments, got %q", args)
	}
	u, err := readObject()
	if err != nil {
		return err
	}
	res, err := status.Compute(u)
	if err != nil {
		return fmt.Errorf("kstatus: %w", err)
	}
	return printReading(Reading{Status: res.Status.String(), Message: res.Message})
}

func argoHealthCmd(args []string) error {
	fl := flag.NewFlagSet("argo-health", flag.ContinueOnError)
	script := fl.String("lua", "", "the health.lua to run")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *script == "" || fl.NArg() != 0 {
		return errors.New("usage: argo-health --lua FILE < OBJECT")
	}
	src, err := os.ReadFile(*script)
	if err != nil {
		return err
	}
	u, err := readObject()
	if err != nil {
		return err
	}
	r, err := runHealthLua(u.Object, string(src))
	if err != nil {
		return fmt.Errorf("%s: %w", *script, err)
	}
	return printReading(r)
}

// The health statuses Argo CD accepts from a script; anything else it reads
// as Unknown with this message.
var argoStatuses = map[string]bool{
	"Unknown": true, "Progressing": true, "Suspended": true,
	"Healthy": true, "Degraded": true, "Missing": true,
}

const argoInvalidStatus = "Lua returned an invalid health status"

// runHealthLua runs a health script as Argo CD's util/lua does for one from
// argocd-cm (open libraries off, the default): a fresh state with only the
// package, base and table libraries and an os library cut down to time and
// date, a one-second deadline, the object as the global `obj`; the table
// the chunk returns goes through gopher-json to the health status. A status
// Argo does not know reads as Unknown.
func runHealthLua(obj map[string]any, script string) (Reading, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	open := func(name string, fn lua.LGFunction) lua.LValue {
		if err := L.CallByParam(lua.P{Fn: L.NewFunction(fn), NRet: 1, Protect: true}, lua.LString(name)); err != nil {
			panic(err)
		}
		v := L.Get(-1)
		L.Pop(1)
		return v
	}
	open(lua.LoadLibName, lua.OpenPackage)
	open(lua.BaseLibName, lua.OpenBase)
	open(lua.TabLibName, lua.OpenTable)
	// Argo's safe os: gopher-lua's time and date, nothing that touches the
	// process or the file system. The one table is the global `os` and
	// what require("os") returns.
	if osLib, ok := open(lua.OsLibName, lua.OpenOs).(*lua.LTable); ok {
		var drop []lua.LValue
		osLib.ForEach(func(k, _ lua.LValue) {
			if k.String() != "time" && k.String() != "date" {
				drop = append(drop, k)
			}
		})
		for _, k := range drop {
			osLib.RawSet(k, lua.LNil)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	L.SetContext(ctx)
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return Reading{}, err
	}
	ret := L.Get(-1)
	if ret.Type() != lua.LTTable {
		return Reading{}, fmt.Errorf("expect table output from Lua script, not %s", ret.Type())
	}
	j, err := luajson.Encode(ret)
	if err != nil {
		return Reading{}, err
	}
	var r Reading
	if err := json.Unmarshal(j, &r); err != nil {
		return Reading{}, err
	}
	if !argoStatuses[r.Status] {
		return Reading{Status: "Unknown", Message: argoInvalidStatus}, nil
	}
	return r, nil
}

// toLua converts a decoded object to Lua values the way Argo CD does:
// numbers of any Go type become Lua numbers, json.Number a string, lists
// sequences, maps tables, and anything else nil.
func toLua(L *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(x)
	case string:
		return lua.LString(x)
	case json.Number:
		return lua.LString(x)
	case float64:
		return lua.LNumber(x)
	case int64:
		return lua.LNumber(x)
	case int32:
		return lua.LNumber(x)
	case int:
		return lua.LNumber(x)
	case []any:
		t := L.CreateTable(len(x), 0)
		for _, item := range x {
			t.Append(toLua(L, item))
		}
		return t
	case map[string]any:
		t := L.CreateTable(0, len(x))
		for k, item := range x {
			t.RawSetH(lua.LString(k), toLua(L, item))
		}
		return t
	}
	return lua.LNil
}

// healthTests is health_test.yaml.
type healthTests struct {
	Tests []struct {
		HealthStatus Reading `json:"healthStatus"`
		InputPath    string  `json:"inputPath"`
	} `json:"tests"`
}

func argoHealthTestsCmd(args []string) error {
	fl := flag.NewFlagSet("argo-health-tests", flag.ContinueOnError)
	docs := fl.String("docs", "", "a Markdown file whose argocd-cm snippets must pass the same tests")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() != 1 {
		return errors.New("usage: argo-health-tests [--docs FILE] DIR")
	}
	root := fl.Arg(0)
	var snippets map[string]string
	if *docs != "" {
		var err error
		if snippets, err = argocdCMSnippets(*docs); err != nil {
			return err
		}
	}
	var scripts []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "health.lua" {
			scripts = append(scripts, path)
		}
		return err
	})
	if err != nil {
		return err
	}
	sort.Strings(scripts)
	passed, failed := 0, 0
	for _, script := range scripts {
		dir := filepath.Dir(script)
		kind := filepath.Base(dir)
		group := filepath.Base(filepath.Dir(dir))
		src, err := os.ReadFile(script)
		if err != nil {
			return err
		}
		sources := []struct{ name, src string }{{"health.lua", string(src)}}
		if snippets != nil {
			// The key argocd-cm holds a health check under.
			key := "resource.customizations.health." + group + "_" + kind
			snippet, ok := snippets[key]
			if !ok {
				return fmt.Errorf("%s has no argocd-cm snippet with key %s for %s", *docs, key, script)
			}
			sources = append(sources, struct{ name, src string }{*docs, snippet})
		}
		raw, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
		if err != nil {
			return err
		}
		var tests healthTests
		if err := yaml.UnmarshalStrict(raw, &tests); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, "health_test.yaml"), err)
		}
		if len(tests.Tests) == 0 {
			return fmt.Errorf("%s has no tests", filepath.Join(dir, "health_test.yaml"))
		}
		for _, source := range sources {
			for _, tc := range tests.Tests {
				name := filepath.ToSlash(filepath.Join(kind, tc.InputPath))
				got, err := healthCase(filepath.Join(dir, tc.InputPath), source.src)
				if err == nil && got == tc.HealthStatus {
					passed++
					fmt.Printf("ok   [%s] %s: %+v\n", source.name, name, got)
					continue
				}
				failed++
				if err != nil {
					fmt.Printf("FAIL [%s] %s: %v\n", source.name, name, err)
				} else {
					fmt.Printf("FAIL [%s] %s: %+v\n", source.name, name, got)
				}
				fmt.Printf("     want %+v\n", tc.HealthStatus)
			}
		}
	}
	fmt.Printf("%d passed, %d failed\n", passed, failed)
	switch {
	case failed > 0:
		return fmt.Errorf("%d of %d health cases failed", failed, passed+failed)
	case passed == 0:
		return fmt.Errorf("no health.lua with tests under %s", root)
	}
	return nil
}

// healthCase loads a test input as Argo's harness does (sigs.k8s.io/yaml
// into a map, so numbers are float64) and runs the script on it.
func healthCase(input, script string) (Reading, error) {
	raw, err := os.ReadFile(input)
	if err != nil {
		return Reading{}, err
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		return Reading{}, fmt.Errorf("%s: %w", input, err)
	}
	return runHealthLua(obj, script)
}

// argocdCMSnippets parses every ```yaml block of a Markdown file that is the
// argocd-cm ConfigMap and returns its data, as Argo CD would read it once
// the block is applied. A key in two blocks is an error.
func argocdCMSnippets(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	found := map[string]string{}
	var block *bytes.Buffer
	line := 0
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line++
		text := sc.Text()
		switch {
		case block == nil && strings.TrimSpace(text) == "```yaml":
			block = &bytes.Buffer{}
		case block != nil && strings.TrimSpace(text) == "```":
			var cm struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
				Data map[string]string `json:"data"`
			}
			body, err := block.Bytes(), yaml.Unmarshal(block.Bytes(), &cm)
			block = nil
			if err != nil {
				// Other blocks need not be objects; this one must parse.
				if bytes.Contains(body, []byte("argocd-cm")) {
					return nil, fmt.Errorf("%s: the yaml block ending at line %d: %w", path, line, err)
				}
				continue
			}
			if cm.Kind != "ConfigMap" || cm.Metadata.Name != "argocd-cm" {
				continue
			}
			for k, v := range cm.Data {
				if _, dup := found[k]; dup {
					return nil, fmt.Errorf("%s: %s is in two argocd-cm blocks", path, k)
				}
				found[k] = v
			}
		case block != nil:
			block.WriteString(text)
			block.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if block != nil {
		return nil, fmt.Errorf("%s: a yaml block is not closed", path)
	}
	return found, nil
}
