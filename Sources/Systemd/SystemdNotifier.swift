import CSystemd

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The service manager's notify protocol (`sd_notify`): readiness, status, watchdog, reload and
/// stop, and the file-descriptor store. Every call is a no-op when `$NOTIFY_SOCKET` is unset
/// (not started by systemd with `Type=notify`).
public struct SystemdNotifier: Sendable {
    /// Creates a notifier.
    public init() {}

    /// Whether a service manager listens (`$NOTIFY_SOCKET` is set).
    public var isEnabled: Bool { ProcessInfo.processInfo.environment["NOTIFY_SOCKET"] != nil }

    /// `READY=1` with a status line: the service answers requests now.
    public func ready(status: String? = nil) {
        send(["READY=1"] + (status.map { ["STATUS=\(Self.oneLine($0))"] } ?? []))
    }

    /// `STATUS=…`: the one-line summary `systemctl status` shows.
    public func status(_ text: String) { send(["STATUS=\(Self.oneLine(text))"]) }

    /// `WATCHDOG=1`: the service is alive.
    public func watchdog() { send(["WATCHDOG=1"]) }

    /// `RELOADING=1` with `MONOTONIC_USEC`: a reload begins; follow with ``ready(status:)``.
    public func reloading() {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let microseconds = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
        send(["RELOADING=1", "MONOTONIC_USEC=\(microseconds)"])
    }

    /// `STOPPING=1`: shutdown begins.
    public func stopping() { send(["STOPPING=1"]) }

    /// The watchdog interval systemd asked for (`WatchdogSec=`), if any.
    public var watchdogInterval: Duration? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return .microseconds(Int64(clamping: microseconds))
    }

    /// `FDSTORE=1` with `FDNAME=name`: hands `descriptor` to the service manager to keep across
    /// restarts. Returns whether the manager took it.
    @discardableResult
    public func store(fileDescriptor descriptor: Int32, name: String) -> Bool {
        guard isEnabled else { return false }
        var fds = [descriptor]
        let state = "FDSTORE=1\nFDNAME=\(name)"
        return sd_pid_notify_with_fds(0, 0, state, &fds, 1) > 0
    }

    /// `FDSTOREREMOVE=1` with `FDNAME=name`: drops the stored descriptors of that name.
    public func removeStored(name: String) { send(["FDSTOREREMOVE=1", "FDNAME=\(name)"]) }

    private func send(_ assignments: [String]) {
        guard isEnabled else { return }
        _ = sd_notify(0, assignments.joined(separator: "\n"))
    }

    /// `text` with every line feed a space, so it stays one assignment of the notify message.
    private static func oneLine(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.map { $0 == "\n" ? " " : $0 }))
    }
}
