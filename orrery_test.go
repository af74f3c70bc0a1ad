package orrery_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-run/orrery"
	"github.com/orrery-run/orrery/examples/ledger"
	"github.com/orrery-run/orrery/world"
)

func TestKernelsAreTheDefinitionsByName(t *testing.T) {
	ks, err := orrery.Kernels(ledger.AccountDef().Kernel(), ledger.TransferDef().Kernel())
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(ks))
	for u, k := range ks {
		if k.Name() != u {
			t.Errorf("universe %q holds the definition %q", u, k.Name())
		}
		names = append(names, u)
	}
	slices.Sort(names)
	if want := []string{ledger.UniverseAccount, ledger.UniverseTransfer}; !slices.Equal(names, want) {
		t.Fatalf("universes %v, want %v", names, want)
	}
	if ks, err := orrery.Kernels(); err != nil || len(ks) != 0 {
		t.Fatalf("no definitions: %v, %v", ks, err)
	}
}

func TestKernelsRefusesTwoDefinitionsOfOneName(t *testing.T) {
	other := world.New[struct{ N int }](ledger.UniverseAccount, 2) // another definition, the same name
	ks, err := orrery.Kernels(ledger.AccountDef().Kernel(), ledger.TransferDef().Kernel(), other.Kernel())
	if err == nil || ks != nil || !strings.Contains(err.Error(), ledger.UniverseAccount) {
		t.Fatalf("two definitions named %s: %v, %v", ledger.UniverseAccount, ks, err)
	}
}

func TestKernelsRefusesABrokenOrMissingDefinition(t *testing.T) {
	broken := world.New[struct{ N int }]("broken", 1)
	world.On(broken, func(*world.Ctx, *struct{ N int }, *int) error { return nil }) // a pointer input type is refused
	if broken.Err() == nil {
		t.Fatal("the broken definition has no error")
	}
	var de *world.DefError
	if _, err := orrery.Kernels(broken.Kernel()); !errors.As(err, &de) || err.Error() != broken.Err().Error() {
		t.Fatalf("a broken definition: %v, want its error %v", err, broken.Err())
	}
	if _, err := orrery.Kernels(ledger.AccountDef().Kernel(), nil); err == nil {
		t.Fatal("a nil definition was accepted")
	}
}
