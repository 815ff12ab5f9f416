package server

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// The inspector's static files: the page shell, its script and its style.
// They hold no data (every figure comes from the authenticated routes
// under /inspector/api/), so they are served without authentication.
//
//go:embed ui
var inspectorFiles embed.FS

// Inspector paths.
const (
	inspectorRoot   = "/inspector/"
	inspectorAssets = "/inspector/assets/"
	inspectorAPI    = "/inspector/api/"
)

// inspectorCSP is the Content-Security-Policy of every inspector response:
// scripts, styles and requests from the server's own origin only, no
// inline script or style (the shell has none), no frames, no forms posting
// elsewhere. Model and tool text is untrusted; the script renders it with
// textContent, and this policy is the second line of defence.
const inspectorCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// isInspectorPath tells whether p is served by the inspector (its pages,
// assets and API, and the root, which leads to it).
func isInspectorPath(p string) bool {
	return p == "/" || p == "/inspector" || strings.HasPrefix(p, inspectorRoot)
}

// setInspectorHeaders sets the security headers of every inspector
// response, errors included.
func setInspectorHeaders(h http.Header) {
	h.Set("Content-Security-Policy", inspectorCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// inspectorPage tells whether p is one of the inspector's pages, which all
// serve the shell (the script routes on the path): the sessions list, a
// session, the cluster.
func inspectorPage(p string) bool {
	switch {
	case p == inspectorRoot, p == inspectorRoot+"cluster":
		return true
	case strings.HasPrefix(p, inspectorRoot+"sessions/"):
		id := strings.TrimPrefix(p, inspectorRoot+"sessions/")
		return id != "" && !strings.Contains(id, "/")
	}
	return false
}

// inspectorRoute returns the route of an inspector path that is not an API
// route (those are in the server's route table): the root's redirect, the
// pages and the assets; nil for any other path.
func (s *Server) inspectorRoute(p string) *route {
	switch {
	case s.cfg.DisableInspector:
		return nil
	case p == "/" || p == "/inspector":
		return &route{name: "inspector_redirect", methods: map[string]http.Handler{http.MethodGet: http.HandlerFunc(redirectToInspector)}}
	case strings.HasPrefix(p, inspectorAssets):
		name := strings.TrimPrefix(p, inspectorAssets)
		if name == "" || strings.Contains(name, "/") || name == "index.html" {
			return nil
		}
		if _, err := fs.Stat(inspectorFiles, "ui/"+name); err != nil {
			return nil
		}
		return &route{name: "inspector_asset", methods: map[string]http.Handler{http.MethodGet: serveInspectorFile(name)}}
	case inspectorPage(p):
		return &route{name: "inspector_page", methods: map[string]http.Handler{http.MethodGet: s.shell}}
	}
	return nil
}

// redirectToInspector sends GET / (and /inspector) to the sessions list.
// The location is relative ("inspector/" from either path), so it holds
// under a prefix the server is mounted at with http.StripPrefix, which
// http.Redirect, resolving against the stripped path, would lose.
func redirectToInspector(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Location", "inspector/")
	w.WriteHeader(http.StatusFound)
}

// inspectorTypes are the content types of the inspector's files, fixed
// here rather than read from the system's MIME table: with nosniff, a
// script served with a wrong type is not run.
var inspectorTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

// inspectorShell serves the page shell with links relative to the page
// (so that a server mounted under a prefix with http.StripPrefix serves a
// working inspector): {{root}} becomes the way to /inspector/ and
// {{assets}} the way to its assets.
func inspectorShell() http.Handler {
	data, err := inspectorFiles.ReadFile("ui/index.html")
	if err != nil {
		panic("server: the inspector shell is not embedded: " + err.Error())
	}
	byDepth := make([][]byte, 2) // /inspector/ and /inspector/cluster; /inspector/sessions/{id}
	for depth := range byDepth {
		up := "./" + strings.Repeat("../", depth)
		byDepth[depth] = []byte(strings.NewReplacer("{{root}}", up, "{{assets}}", up+"assets/").Replace(string(data)))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		depth := min(strings.Count(strings.TrimPrefix(r.URL.Path, inspectorRoot), "/"), len(byDepth)-1)
		w.Header().Set("Content-Type", inspectorTypes[".html"])
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(byDepth[depth])
	})
}

// serveInspectorFile serves one embedded file. The files change only with
// the binary: the shell is revalidated on each load (no-cache), so a new
// binary's assets are picked up at once.
func serveInspectorFile(name string) http.Handler {
	data, err := inspectorFiles.ReadFile("ui/" + name)
	if err != nil {
		panic("server: the inspector file " + name + " is not embedded: " + err.Error()) // checked by the caller
	}
	ctype := inspectorTypes[path.Ext(name)]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(data)
	})
}
