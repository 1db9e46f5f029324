import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

extension CacheFile {
    /// Starts a snapshot in the file's place, to be written atomically: the directory, its
    /// file system and what is at the path (``checkWhatIsThere()``) are checked again, and a temporary file beside it (`<file>.tmp`, made anew,
    /// mode 0600) takes the body as it comes; the commit writes the header at its start, syncs
    /// it, renames it over the file and syncs the directory. On a failure, or when abandoned, the
    /// temporary file is removed and the file is left as it was.
    public func begin() throws -> any SnapshotSink {
        do {
            try SocketPath.secureDirectory(directory, uid: uid, role: .cacheFile)
        } catch {
            throw Problem(description: "\(error)")
        }
        try checkFileSystem()
        try checkWhatIsThere()
        let temporary = temporaryPath
        // A temporary file left by a process that died while writing; unlink never follows a link.
        if unlink(temporary) != 0, errno != ENOENT {
            throw Problem(description: "cannot remove \(temporary): \(Self.errorText())")
        }
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Problem(description: "cannot create \(temporary): \(Self.errorText())") }
        // The umask may have taken bits away, never added: set exactly 0600.
        guard fchmod(fd, 0o600) == 0 else {
            let problem = Problem(description: "cannot write \(temporary): chmod: \(Self.errorText())")
            close(fd)
            unlink(temporary)
            throw problem
        }
        return DescriptorSink(fd: fd, placement: TemporaryFile(file: self))
    }

    /// The temporary file a snapshot is written into: synced, then renamed over the file and the
    /// directory synced; removed when the snapshot is given up.
    struct TemporaryFile: DescriptorPlacement {
        let file: CacheFile

        func writeFailed(_ error: any Error) -> any Error {
            Problem(description: "cannot write \(file.temporaryPath): \(error)")
        }

        func seal(_ fd: Int32, _ framing: CacheSnapshot.Encoded) throws {
            guard fsync(fd) == 0 else { throw Problem(description: "fsync: \(CacheFile.errorText())") }
        }

        func place() throws {
            let temporary = file.temporaryPath
            // Never over a device, a FIFO or a socket (``CacheFile/checkWhatIsThere()``), put
            // there since the start.
            do {
                try file.checkWhatIsThere()
            } catch {
                unlink(temporary)
                throw error
            }
            guard rename(temporary, file.path) == 0 else {
                let problem = Problem(
                    description: "cannot rename \(temporary) to \(file.path): \(CacheFile.errorText())"
                )
                unlink(temporary)
                throw problem
            }
            let directoryFD = open(file.directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if directoryFD >= 0 {
                _ = fsync(directoryFD)
                close(directoryFD)
            }
        }

        func discard() {
            unlink(file.temporaryPath)
        }
    }
}
