package e2e

import (
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	notSlug = regexp.MustCompile(`[^a-z0-9 _-]`)
)

// Every relative link of the README, the docs pages and the benchmark pages reaches a file of the
// repository, and every #anchor a heading of the page it names: the pages link each other's sections, and a
// renamed heading or a moved page must not leave a reader at a dead end.
func TestDocsLinksResolve(t *testing.T) {
	pages := append(docPages(t), "BENCHMARKS.md", "bench/README.md")
	links := 0
	for _, page := range pages {
		for _, target := range linkTargets(repoFile(t, page)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			name := page
			if file != "" {
				name = path.Join(path.Dir(page), file)
			}
			if _, err := os.Stat("../../" + name); err != nil {
				t.Errorf("%s links %s: %v", page, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(name, ".md") && !anchors(repoFile(t, name))[anchor] {
				t.Errorf("%s links %s: %s has no heading whose anchor is #%s", page, target, name, anchor)
			}
		}
	}
	if links < 30 {
		t.Errorf("found %d relative links in %v: the link syntax was not recognised", links, pages)
	}
}

// linkTargets returns the targets of the markdown links of text, outside code blocks.
func linkTargets(text string) []string {
	var out []string
	for _, block := range proseBlocks(text) {
		for _, m := range mdLink.FindAllStringSubmatch(block, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// anchors returns the anchors GitHub gives text's headings: lower case, punctuation dropped, spaces as
// hyphens, and -1, -2, ... after the first of equal ones.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, block := range proseBlocks(text) {
		for _, line := range strings.Split(block, "\n") {
			if !strings.HasPrefix(line, "#") {
				continue
			}
			slug := strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#"))), ""), " ", "-")
			unique := slug
			for i := 1; out[unique]; i++ {
				unique = slug + "-" + strconv.Itoa(i)
			}
			out[unique] = true
		}
	}
	return out
}

// proseBlocks splits text at its fenced code blocks and returns the parts outside them.
func proseBlocks(text string) []string {
	parts := strings.Split(text, "\n```")
	var out []string
	for i := 0; i < len(parts); i += 2 {
		out = append(out, parts[i])
	}
	return out
}
