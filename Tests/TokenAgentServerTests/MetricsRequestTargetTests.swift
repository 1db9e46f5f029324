import Testing

@testable import TokenAgentServer

/// The metrics listener reads a request target as RFC 9112 section 3.2 says: origin form, and
/// absolute form served as the path it names.
@Suite("Metrics request targets")
struct MetricsRequestTargetTests {
    @Test(arguments: [
        ("/metrics", "/metrics"),
        ("/metrics?name[]=x", "/metrics"),
        ("/", "/"),
        ("http://127.0.0.1:9464/metrics", "/metrics"),
        ("HTTP://localhost/metrics?x=1", "/metrics"),
        ("http://[::1]:9464/metrics#frag", "/metrics"),
        ("http://127.0.0.1:9464", "/"),
        ("http://127.0.0.1:9464?x", "/"),
        ("https://host/other", "/other"),
        ("/a://b", "/a://b"),
        ("*", "*"),
    ])
    func theTargetsPath(target: String, path: String) {
        #expect(MetricsHTTPHandler.path(of: target) == path)
    }
}
