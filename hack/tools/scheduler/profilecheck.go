package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	frameworkplugins "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"sigs.k8s.io/yaml"
)

// configNames is the part of a KubeSchedulerConfiguration that names plugins.
type configNames struct {
	Profiles []struct {
		SchedulerName string `json:"schedulerName"`
		// Plugins by extension point (multiPoint, score, filter, ...).
		Plugins map[string]struct {
			Enabled  []struct{ Name string } `json:"enabled"`
			Disabled []struct{ Name string } `json:"disabled"`
		} `json:"plugins"`
		PluginConfig []struct{ Name string } `json:"pluginConfig"`
	} `json:"profiles"`
}

// checkProfile returns an error naming the field (profiles[i].plugins.<point>.enabled[j].name,
// ...disabled[j].name or profiles[i].pluginConfig[j].name) of the first plugin name in the
// configuration raw that is not in registered; "*" may be disabled. kube-scheduler's own check
// names only the plugin, as a PreFilterPlugin whatever its kind.
func checkProfile(raw []byte, registered map[string]bool, ours []string) error {
	var cfg configNames
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("decoding the scheduler configuration: %w", err)
	}
	unknown := func(field, name string) error {
		return fmt.Errorf("%s: unknown plugin %q: neither one of NeuroNetes' plugins (%s) nor an in-tree kube-scheduler plugin",
			field, name, strings.Join(ours, ", "))
	}
	for i, p := range cfg.Profiles {
		points := make([]string, 0, len(p.Plugins))
		for point := range p.Plugins {
			points = append(points, point)
		}
		slices.Sort(points)
		for _, point := range points {
			set := p.Plugins[point]
			for j, e := range set.Enabled {
				if !registered[e.Name] {
					return unknown(fmt.Sprintf("profiles[%d].plugins.%s.enabled[%d].name", i, point, j), e.Name)
				}
			}
			for j, d := range set.Disabled {
				if d.Name != "*" && !registered[d.Name] {
					return unknown(fmt.Sprintf("profiles[%d].plugins.%s.disabled[%d].name", i, point, j), d.Name)
				}
			}
		}
		for j, pc := range p.PluginConfig {
			if !registered[pc.Name] {
				return unknown(fmt.Sprintf("profiles[%d].pluginConfig[%d].name", i, j), pc.Name)
			}
		}
	}
	return nil
}

// registry returns every plugin name neuronetes-scheduler knows (in-tree and opts) and, sorted,
// the names opts register.
func registry(opts []app.Option) (map[string]bool, []string, error) {
	own := frameworkruntime.Registry{}
	for _, o := range opts {
		if err := o(own); err != nil {
			return nil, nil, err
		}
	}
	all := map[string]bool{}
	var ours []string
	for name := range own {
		all[name] = true
		ours = append(ours, name)
	}
	for name := range frameworkplugins.NewInTreeRegistry() {
		all[name] = true
	}
	slices.Sort(ours)
	return all, ours, nil
}

// withProfileCheck makes cmd check the --config file's plugin names (checkProfile) before
// kube-scheduler reads it.
func withProfileCheck(cmd *cobra.Command, opts []app.Option) *cobra.Command {
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if f := c.Flags().Lookup("config"); f != nil && f.Value.String() != "" {
			raw, err := os.ReadFile(f.Value.String())
			if err != nil {
				return fmt.Errorf("reading --config: %w", err)
			}
			all, ours, err := registry(opts)
			if err != nil {
				return err
			}
			if err := checkProfile(raw, all, ours); err != nil {
				return fmt.Errorf("--config %s: %w", f.Value.String(), err)
			}
		}
		return run(c, args)
	}
	return cmd
}
