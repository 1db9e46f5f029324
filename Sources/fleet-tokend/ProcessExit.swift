#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Ends the process with `status` (C's `exit`: standard output is flushed), for a command that has
/// printed its outcome and has nothing left to unwind. (Inside a command, a bare `exit` names
/// ArgumentParser's `exit(withError:)`.)
func exitProcess(_ status: Int32) -> Never {
    exit(status)
}
