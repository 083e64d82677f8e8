package tickfence_test

import (
	"go/importer"
	"go/token"
	"go/types"
	"os/exec"
	"strings"
	"testing"
)

// publicPackages lists the module's packages a game or tool may import (not internal, not cmd).
func publicPackages(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		if !strings.Contains(p, "/internal/") && !strings.Contains(p, "/cmd/") && !strings.HasSuffix(p, "/bench") {
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) < 8 {
		t.Fatalf("only %d public packages found: %v", len(pkgs), pkgs)
	}
	return pkgs
}

// No exported function, method, type or field of a public package names a type of an internal
// package: another module could not write it (issue 11).
func TestNoInternalTypeInExportedAPI(t *testing.T) {
	imp := importer.ForCompiler(token.NewFileSet(), "source", nil)
	checked := 0
	for _, path := range publicPackages(t) {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("type-check %s: %v", path, err)
		}
		var bad []string
		seen := map[types.Type]bool{}
		var walk func(where string, ty types.Type)
		walk = func(where string, ty types.Type) {
			if seen[ty] {
				return
			}
			seen[ty] = true
			switch x := ty.(type) {
			case *types.Named:
				if p := x.Obj().Pkg(); p != nil && strings.Contains(p.Path(), "/internal/") {
					bad = append(bad, where+": "+x.String())
				}
				if x.Obj().Pkg() == pkg && x.Obj().Exported() {
					walk(where, x.Underlying())
				}
				for i := 0; i < x.NumMethods(); i++ {
					if m := x.Method(i); m.Exported() && m.Pkg() == pkg {
						walk(where+"."+m.Name(), m.Type())
					}
				}
			case *types.Alias:
				walk(where, types.Unalias(x))
			case *types.Pointer:
				walk(where, x.Elem())
			case *types.Slice:
				walk(where, x.Elem())
			case *types.Array:
				walk(where, x.Elem())
			case *types.Map:
				walk(where, x.Key())
				walk(where, x.Elem())
			case *types.Chan:
				walk(where, x.Elem())
			case *types.Signature:
				for i := 0; i < x.Params().Len(); i++ {
					walk(where, x.Params().At(i).Type())
				}
				for i := 0; i < x.Results().Len(); i++ {
					walk(where, x.Results().At(i).Type())
				}
			case *types.Struct:
				for i := 0; i < x.NumFields(); i++ {
					if f := x.Field(i); f.Exported() {
						walk(where+"."+f.Name(), f.Type())
					}
				}
			case *types.Interface:
				for i := 0; i < x.NumMethods(); i++ {
					walk(where+"."+x.Method(i).Name(), x.Method(i).Type())
				}
			}
		}
		for _, name := range pkg.Scope().Names() {
			obj := pkg.Scope().Lookup(name)
			if !obj.Exported() {
				continue
			}
			checked++
			walk(path+"."+name, obj.Type())
		}
		for _, b := range bad {
			t.Errorf("exported API names an internal type: %s", b)
		}
	}
	t.Logf("%d exported names checked", checked)
}

// The game API and its test harness, the shard runtime, the coordinator and the store contract
// do not depend on NATS: only the adapters (store/natskv, shard/natscmd) and the programs do.
func TestCoreDoesNotImportNATS(t *testing.T) {
	for _, p := range []string{"./actor", "./actor/dungeon", "./actortest", "./shard", "./shard/node", "./shard/wire", "./coordinator", "./store", "./store/memstore"} {
		out, err := exec.Command("go", "list", "-deps", p).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", p, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/nats-io/") {
				t.Errorf("%s depends on %s", p, dep)
			}
		}
	}
}
