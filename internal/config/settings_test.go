package config_test

import (
	"slices"
	"testing"

	"github.com/stockflow/stockflow/internal/config"
	"github.com/stockflow/stockflow/internal/demo"
	"github.com/stockflow/stockflow/internal/producer"
	"github.com/stockflow/stockflow/internal/worker"
)

// config.Settings is every environment variable of the binaries (stockctl's are the worker's), and the
// _FILE variable of each secret: a binary lets through another's settings and refuses look-alikes.
func TestSettingsAreTheBinariesSettings(t *testing.T) {
	defines := []func(*config.Set){
		func(s *config.Set) { var c worker.Config; worker.Flags(s, &c) },
		func(s *config.Set) { var c producer.Config; producer.Flags(s, &c) },
		func(s *config.Set) { var c demo.Config; demo.Flags(s, &c) },
	}
	var got []string
	for _, define := range defines {
		s := config.NewSet("t", func(string) (string, bool) { return "", false })
		define(s)
		for _, p := range s.Params() {
			got = append(got, p.Env, p.File)
		}
	}
	slices.Sort(got)
	got = slices.DeleteFunc(got, func(name string) bool { return name == "" })
	if got = slices.Compact(got); !slices.Equal(got, config.Settings()) {
		t.Errorf("the binaries' settings are\n%q\nconfig.Settings is\n%q", got, config.Settings())
	}
}
