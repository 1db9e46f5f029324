import AsyncHTTPClient

extension HTTPClient {
    /// The client every outbound call of the agent uses (token providers, IAM Credentials, the
    /// host's credentials): `connectTimeout` bounds the connection; the read time-out is a second
    /// longer than the request's deadline (`timeout`), so a silent server always ends as "Deadline
    /// exceeded", not as whichever of two equal timers a loaded machine happens to fire first.
    /// Redirects are not followed (a bearer token or an id must not travel elsewhere), and bodies
    /// are not decompressed (their size limits count the bytes received). The pool may open as
    /// many HTTP/1.1 connections to a host as the kind's lane lets fetches run
    /// (`max_concurrent_fetches`, at most 1024); AsyncHTTPClient's default of 8 would make every
    /// fetch past the eighth wait for a connection, whatever `max_concurrent_fetches` says.
    static func outbound(connectTimeout: Double, timeout: Double) -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(
            idleTimeout: .seconds(60),
            concurrentHTTP1ConnectionsPerHostSoftLimit: 1024
        )
        configuration.timeout = .init(
            connect: .milliseconds(Int64(connectTimeout * 1000)),
            read: .milliseconds(Int64(timeout * 1000) + 1000)
        )
        configuration.redirectConfiguration = .disallow
        configuration.decompression = .disabled
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Starts shutting the client down and returns at once, for the `deinit` of its owner: an
    /// owner dropped without its `shutdown()` (a configuration build given up half-way, a test
    /// that ended early) still closes its connections, where AsyncHTTPClient would otherwise leak
    /// them (and, in a debug build, trap). The shutdown holds the client until it is done; a
    /// client already shut down is left as it is.
    func shutDownInBackground() {
        shutdown { _ in }
    }
}
