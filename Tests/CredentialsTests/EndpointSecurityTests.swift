import Testing
import TokenAgent

@Suite("Endpoint security")
struct EndpointSecurityTests {
    @Test(arguments: [
        "https://oauth2.googleapis.com/token", "https://iamcredentials.googleapis.com", "https://10.0.0.5:8443/x",
        "http://127.0.0.1:8080/token", "http://127.5.6.7/token", "http://localhost/token", "http://LOCALHOST:99/t",
        "http://[::1]:8080/token", "http://[0:0:0:0:0:0:0:1]/token",
    ])
    func accepts(url: String) throws {
        try EndpointSecurity.check(url: url, key: "k")
    }

    @Test(arguments: [
        "http://oauth2.googleapis.com/token", "http://10.0.0.5/token", "http://128.0.0.1/token",
        "http://127.0.0.1.evil.example/token", "http://localhost.evil.example/t", "http://[::2]/token",
        "http://metadata.google.internal/token", "http://169.254.169.254/token", "ftp://127.0.0.1/token",
        "token", "https:///token", "https://user:pass@oauth2.googleapis.com/token",
    ])
    func refuses(url: String) {
        #expect(throws: ConfigurationError.self) { try EndpointSecurity.check(url: url, key: "iam_endpoint") }
    }

    /// Only scheme, host, port and a path prefix: what would move the request or add to it is
    /// refused, naming the key, never printing a password.
    @Test(arguments: [
        ("https://iam.example.com?", "query"), ("https://iam.example.com/?x=", "query"),
        ("https://iam.example.com/v1?account=a", "query"), ("https://iam.example.com#frag", "fragment"),
        ("https://iam.example.com/#", "fragment"), ("https://user:hunter2@iam.example.com/", "user-info"),
        ("https://@iam.example.com/", "user-info"), ("https://iam.example.com:hunter2@evil.example/", "user-info"),
        ("https://iam.example.com/a b", "space"), ("https://iam.example.com/a\\b", "backslash"),
        ("https://iam.example.com/a\nb", "control"), ("https://iam.example.com/a;b", "path"),
        ("https://iam.example.com/a@b", "path"), ("https://iam.example.com/%zz", "path"),
        ("https://iam.example.com:0/", "port"), ("https://iam.example.com:65536/", "port"),
        ("https://iam.example.com:/", "port"), ("https://iam.example.com:443:1/", "port"),
        ("https://[::1/", "host"), ("https://[fe80::1%25eth0]/", "host"), ("https://ia_m.example.com/", "host"),
    ])
    func refusesAnythingButSchemeHostPortAndPath(url: String, why: String) {
        let error = configurationError { () throws(ConfigurationError) in
            try EndpointSecurity.check(url: url, key: "iam_endpoint")
        }
        #expect(error?.key == "iam_endpoint", "\(url)")
        #expect(error?.reason.contains(why) == true, "\(url): \(error?.reason ?? "accepted")")
        #expect(error?.reason.contains("hunter2") == false, "\(url): \(error?.reason ?? "accepted")")
    }

    @Test func requestURLsAreBuiltFromTheParts() throws {
        let cases: [(String, String, String)] = [
            ("https://iam.example.com", "/v1/x:signJwt", "https://iam.example.com/v1/x:signJwt"),
            ("https://iam.example.com/", "/v1/x:signJwt", "https://iam.example.com/v1/x:signJwt"),
            ("https://IAM.example.com:8443/proxy/iam//", "/v1/x", "https://IAM.example.com:8443/proxy/iam/v1/x"),
            ("HTTP://[::1]:9/", "/v1/x", "http://[::1]:9/v1/x"),
            ("https://oauth2.googleapis.com/token", "", "https://oauth2.googleapis.com/token"),
            ("https://oauth2.googleapis.com/token/", "", "https://oauth2.googleapis.com/token/"),
            ("https://10.0.0.5", "", "https://10.0.0.5/"),
        ]
        for (text, path, url) in cases {
            #expect(try EndpointSecurity.check(url: text, key: "k").url(path) == url, "\(text)")
        }
        let endpoint = try EndpointSecurity.check(url: "https://iam.example.com:8443/p", key: "k")
        #expect(endpoint.scheme == "https" && endpoint.host == "iam.example.com")
        #expect(endpoint.port == 8443 && endpoint.pathPrefix == "/p")
    }

    @Test func userInfoIsRedactedFromEveryShape() {
        #expect(EndpointSecurity.redactingUserInfo("https://u:pw@h/x") == "https://<redacted>@h/x")
        #expect(EndpointSecurity.redactingUserInfo("u:pw@h:80") == "<redacted>@h:80")
        #expect(EndpointSecurity.redactingUserInfo("https://a@b:pw@h/") == "https://<redacted>@h/")
        #expect(EndpointSecurity.redactingUserInfo("https://h/a@b") == "https://h/a@b")
        #expect(EndpointSecurity.redactingUserInfo("https://h?u=a@b") == "https://h?u=a@b")
    }

    @Test func metadataServerIsTheOneHTTPException() throws {
        for url in ["http://metadata.google.internal/x", "http://169.254.169.254/x", "http://127.0.0.1:1/x"] {
            try EndpointSecurity.check(url: url, key: "k", allowingMetadataServer: true)
        }
        #expect(throws: ConfigurationError.self) {
            try EndpointSecurity.check(url: "http://metadata.example.com/x", key: "k", allowingMetadataServer: true)
        }
    }

    @Test func errorNamesTheKeyAndSaysWhy() {
        let error = configurationError { () throws(ConfigurationError) in
            try EndpointSecurity.check(url: "http://iam.example.com", key: "issuers.vehicle.iam_endpoint")
        }
        #expect(error?.key == "issuers.vehicle.iam_endpoint")
        #expect(error?.reason.contains("https") == true)
        #expect(error?.reason.contains("iam.example.com") == true)
    }

    @Test func loopbackHosts() {
        #expect(EndpointSecurity.isLoopback(host: "127.0.0.1"))
        #expect(EndpointSecurity.isLoopback(host: "127.255.255.254"))
        #expect(EndpointSecurity.isLoopback(host: "::1"))
        #expect(EndpointSecurity.isLoopback(host: "localhost"))
        #expect(!EndpointSecurity.isLoopback(host: "127.0.0.1.nip.io"))
        #expect(!EndpointSecurity.isLoopback(host: "0.0.0.0"))
        #expect(!EndpointSecurity.isLoopback(host: "127.0.0.256"))
        #expect(!EndpointSecurity.isLoopback(host: ""))
    }
}
