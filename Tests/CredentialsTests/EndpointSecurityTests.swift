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
