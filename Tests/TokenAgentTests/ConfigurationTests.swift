import Foundation
import Testing
import TokenAgent

@Suite("Configuration")
struct ConfigurationTests {
    private func parse(_ json: String) throws -> AgentConfiguration {
        try ConfigurationFile.parse(Data(json.utf8), over: AgentConfiguration())
    }

    private func problem(_ json: String) -> ConfigurationError? {
        do {
            try parse(json).validate()
            return nil
        } catch let error as ConfigurationError {
            return error
        } catch {
            return nil
        }
    }

    @Test func defaults() {
        let configuration = AgentConfiguration()
        #expect(configuration.socketPath == "/run/fleet-tokend/tokens.sock")
        #expect(configuration.refreshMargin == 600)
        #expect(configuration.minValidity == 300)
        #expect(configuration.idleTimeout == 600)
        #expect(configuration.maxEntries == 100_000)
        #expect(!configuration.usesDemoIssuer, "the demo issuer runs only when asked for")
        #expect(AgentConfiguration(environment: ["FLEET_TOKEND_SOCKET": "/tmp/x.sock"]).socketPath == "/tmp/x.sock")
    }

    @Test func somethingToServeOrTheDemoOnPurpose() throws {
        #expect(problem("{}")?.key == "providers")
        #expect(problem("{}")?.reason.hasPrefix("nothing to serve: configure an HTTP provider") == true)
        #expect(problem(#"{"demo": false}"#)?.key == "providers")
        let demo = try parse(#"{"demo": true}"#)
        try demo.validate()
        #expect(demo.usesDemoIssuer)
        #expect(demo.configuredKinds == Set(FleetEngineKinds.all))
        for alongside in [
            #""providers": {"vehicle": {"url": "http://p/{id}"}}"#,
            #""issuer_key": "/k.json""#,
            #""issuers": {"vehicle": {"key_file": "/k.json"}}"#,
        ] {
            let error = problem(#"{"demo": true, "# + alongside + "}")
            #expect(error?.key == "demo", "\(alongside)")
            #expect(error?.reason.hasPrefix("the demo issuer runs only alone") == true)
        }
        // A bad value is named before what is missing.
        #expect(problem(#"{"max_entries": 0}"#)?.key == "max_entries")
        #expect(problem(#"{"demo": "yes"}"#) != nil, "a boolean")
    }

    @Test func acceptWildcardAndMaxLifetimePerProvider() async throws {
        let configuration = try parse(
            #"{"providers": {"vehicle": {"url": "http://p/{id}", "accept_wildcard": true, "max_lifetime": 3600},"#
                + #" "trip": {"url": "http://p/t/{id}"}}}"#
        )
        try configuration.validate()
        #expect(configuration.wildcardKinds == ["vehicle"])
        #expect(configuration.providers["vehicle"]?.maxLifetime == 3600)
        #expect(configuration.providers["trip"]?.acceptWildcard == nil)
        for bad in ["59", "2592001", "1e300", "-1"] {
            let json = #"{"providers": {"vehicle": {"url": "http://p/{id}", "max_lifetime": \#(bad)}}}"#
            #expect(problem(json)?.key == "providers.vehicle.max_lifetime", "\(bad)")
        }
        let text = #"{"providers": {"vehicle": {"url": "http://p/{id}", "accept_wildcard": "yes"}}}"#
        #expect(problem(text)?.key == "providers.vehicle.accept_wildcard")
        let built = try ProviderSet.build(from: configuration)
        let relaxed = try ProviderSet.build(
            from: try parse(
                #"{"providers": {"vehicle": {"url": "http://p/{id}"}, "trip": {"url": "http://p/t/{id}"}}}"#
            )
        )
        #expect(
            relaxed.changedKinds(since: built) == ["vehicle"],
            "accept_wildcard and max_lifetime change the provider"
        )
        for provider in built.providers.values { await provider.shutdown() }
        for provider in relaxed.providers.values { await provider.shutdown() }
    }

    @Test func hugeNumbersAreRefusedNotTrapped() {
        #expect(problem(#"{"shared_memory_max_bytes": 1e300}"#)?.key == "shared_memory_max_bytes")
        for rotation in ["0", "0.5", "86401", "-1"] {
            #expect(
                problem(#"{"shared_memory_rotation": \#(rotation)}"#)?.key == "shared_memory_rotation",
                "\(rotation)"
            )
        }
        #expect(problem(#"{"max_entries": 1e300}"#)?.key == "max_entries")
        #expect(problem(#"{"min_validity": 1e300}"#)?.key == "min_validity")
        #expect(problem(#"{"issuer_lifetime": 1e300}"#)?.key == "issuer_lifetime")
        #expect(problem(#"{"request_timeout": 1e300}"#)?.key == "request_timeout")
        #expect(
            problem(#"{"providers": {"v": {"url": "http://p/{id}", "timeout": 1e300}}}"#)?.key == "providers.v.timeout"
        )
    }

    @Test func observabilityKeys() throws {
        let defaults = AgentConfiguration()
        #expect(defaults.metricsListen == nil, "the HTTP listener is off by default")
        #expect(defaults.degradedAfter == 120)
        #expect(defaults.refresherStallAfter == 10)
        let configuration = try parse(
            #"{"demo": true, "metrics_listen": "127.0.0.1:9464", "degraded_after": 0, "refresher_stall_after": 30}"#
        )
        try configuration.validate()
        #expect(configuration.metricsListen == "127.0.0.1:9464")
        #expect(configuration.degradedAfter == 0)
        #expect(configuration.refresherStallAfter == 30)
        #expect(problem(#"{"metrics_listen": "example.com:80"}"#)?.key == "metrics_listen")
        #expect(problem(#"{"metrics_listen": "127.0.0.1:0"}"#)?.key == "metrics_listen")
        #expect(problem(#"{"degraded_after": -1}"#)?.key == "degraded_after")
        #expect(problem(#"{"refresher_stall_after": 1}"#)?.key == "refresher_stall_after")
        #expect(problem(#"{"metrics_listen": 9464}"#)?.key == "metrics_listen", "a string")
    }

    @Test func readsEveryKey() throws {
        let configuration = try parse(
            """
            {"socket": "/tmp/a.sock", "refresh_margin": 120, "min_validity": 60, "idle_timeout": 30,
             "max_entries": 5, "max_concurrent_fetches": 2, "max_connections": 7, "log_level": "debug",
             "socket_mode": "0600",
             "issuer_key": "/k.json", "issuer_lifetime": 900,
             "providers": {"vehicle": {"url": "https://p.example/v/{id}", "token_field": "VEHICLE_TOKEN_KEY",
               "expiry_field": "TOKEN_EXPIRATION", "expiry_mode": "relative", "headers_file": "/h",
               "connect_timeout": 1, "timeout": 3, "claim": "vehicleid"}}}
            """
        )
        try configuration.validate()
        #expect(configuration.socketPath == "/tmp/a.sock")
        #expect(configuration.refreshMargin == 120)
        #expect(configuration.minValidity == 60)
        #expect(configuration.idleTimeout == 30)
        #expect(configuration.maxEntries == 5)
        #expect(configuration.maxConcurrentFetches == 2)
        #expect(configuration.maxConnections == 7)
        #expect(configuration.socketMode == 0o600)
        #expect(configuration.logLevel == "debug")
        #expect(configuration.issuerKeyPath == "/k.json")
        #expect(configuration.issuerLifetime == 900)
        let vehicle = try #require(configuration.providers["vehicle"])
        #expect(vehicle.url == "https://p.example/v/{id}")
        #expect(vehicle.tokenField == "VEHICLE_TOKEN_KEY")
        #expect(vehicle.expiryMode == .relative)
        #expect(vehicle.timeout == 3)
        #expect(!configuration.usesDemoIssuer)
    }

    @Test func problemsNameTheKey() {
        #expect(problem(#"{"refresh_margn": 5}"#)?.key == "refresh_margn")
        #expect(
            problem(#"{"providers": {"trip": {"url": "http://x/{id}", "tokn": "a"}}}"#)?.key == "providers.trip.tokn"
        )
        #expect(problem(#"{"min_validity": "five"}"#)?.key == "min_validity")
        #expect(problem(#"{"providers": {"trip": {"timeout": 3}}}"#)?.key == "providers.trip.url")
        #expect(problem(#"{"providers": {"trip": {"url": "ftp://x/{id}"}}}"#)?.key == "providers.trip.url")
        #expect(problem(#"{"providers": {"trip": {"url": "http://x/"}}}"#)?.key == "providers.trip.url")
        #expect(problem(#"{"providers": {"Trip!": {"url": "http://x/{id}"}}}"#)?.key == "providers.Trip!")
        #expect(problem(#"{"providers": {"trip": {"url": "http://x/{id}", "expiry_mode": "sideways"}}}"#) != nil)
        #expect(problem(#"{"max_entries": 0}"#)?.key == "max_entries")
        #expect(problem(#"{"log_level": "loud"}"#)?.key == "log_level")
        #expect(problem(#"{"idle_timeout": -1}"#)?.key == "idle_timeout")
        #expect(problem(#"{"issuer_lifetime": 7200}"#)?.key == "issuer_lifetime")
        #expect(problem("[1]")?.key == "config")
        #expect(problem("{")?.key == "config")
        #expect(problem(#"{"providers": {"trip": {"url": "http://x/{id}"}}}"#) == nil)
    }

    /// An internationalized host must be written in its `xn--` form: the agent does not convert
    /// it, and a host name that is not ASCII resolves nowhere. The rest of the URL may hold
    /// anything (it is percent-encoded).
    @Test func providerHostIsASCII() {
        let refused = problem(#"{"providers": {"trip": {"url": "https://tökens.example/{id}"}}}"#)
        #expect(refused?.key == "providers.trip.url")
        #expect(refused?.description.contains("xn--") == true)
        #expect(problem(#"{"providers": {"trip": {"url": "https://u@tökens.example:8443/{id}"}}}"#) != nil)
        for url in ["https://xn--tkens-jua.example/{id}", "https://tokens.example/é/{id}", "http://ü@x/{id}?q=ß"] {
            #expect(problem(#"{"providers": {"trip": {"url": "\#(url)"}}}"#) == nil, "\(url)")
        }
    }

    @Test func headersFile() throws {
        let headers = try HeadersFile.parse("# comment\nAuthorization: Bearer abc\n\nX-Api-Key:  k:1 \n", key: "h")
        #expect(headers.map(\.0) == ["Authorization", "X-Api-Key"])
        #expect(headers.map(\.1) == ["Bearer abc", "k:1"])
        #expect(throws: ConfigurationError.self) { try HeadersFile.parse("no colon here", key: "h") }
        #expect(throws: ConfigurationError.self) { try HeadersFile.parse("Bad Name: x", key: "h") }
        // Blanks are Unicode's: no-break, ideographic and zero-width spaces are trimmed too, and
        // a line's ends lose line breaks (U+0085, U+2028) as well; a blank inside stays.
        let unicode = try HeadersFile.parse("\u{2028} X-A :\u{A0}v w\u{200B}\u{3000}\t\u{85}\n\u{3000}#x", key: "h")
        #expect(unicode.map(\.0) == ["X-A"])
        #expect(unicode.map(\.1) == ["v w"])
    }

    @Test func providerSetServesWellKnownKindsFromTheIssuer() async throws {
        var configuration = AgentConfiguration()
        configuration.providers["vehicle"] = ProviderSettings(url: "http://127.0.0.1:1/v/{id}")
        configuration.providers["custom"] = ProviderSettings(url: "http://127.0.0.1:1/c/{id}")
        let httpOnly = try ProviderSet.make(from: configuration)
        #expect(Set(httpOnly.keys) == ["vehicle", "custom"], "no key and providers configured: no demo issuer")
        #expect(httpOnly["vehicle"] is HTTPTokenProvider)
        var demoConfiguration = AgentConfiguration()
        demoConfiguration.demo = true
        let demo = try ProviderSet.make(from: demoConfiguration)
        #expect(Set(demo.keys) == Set(FleetEngineKinds.all))
        #expect((demo["trip"] as? LocalIssuer)?.isDemo == true)
        configuration.issuerKeyPath = "/nonexistent/key.json"
        #expect(throws: ConfigurationError(key: "issuer_key", "cannot read /nonexistent/key.json")) {
            try ProviderSet.make(from: configuration)
        }
        for provider in httpOnly.values { await provider.shutdown() }
    }
}
