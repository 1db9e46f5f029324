import Foundation
import PackagePlugin

/// Writes `BuildCommit.swift` into the target: the commit the package is built from
/// (`git rev-parse --short=12 HEAD`, `-dirty` when a tracked file differs from it), or `unknown`
/// outside a git checkout.
///
/// A build command whose inputs are what a commit or an edit changes: git's `HEAD`, its log,
/// the index and the branch's ref, and every file of the package's targets. SwiftPM does not run
/// a prebuild command when it finds the package unchanged, so a commit with no edit after the
/// last build left the previous commit (with `-dirty`) in the binary; llbuild runs this command
/// whenever one of its inputs changed. The file is replaced only when its text changes, so an
/// unchanged commit rebuilds nothing.
@main
struct BuildCommitPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let output = context.pluginWorkDirectoryURL.appending(path: "Generated")
        let root = context.package.directoryURL
        let file = output.appending(path: "BuildCommit.swift")
        let script = """
            commit=$(git -C "$0" rev-parse --short=12 HEAD 2>/dev/null) || commit=unknown
            if [ "$commit" != unknown ] && [ -n "$(git -C "$0" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
                commit="$commit-dirty"
            fi
            mkdir -p "$(dirname "$1")"
            printf '/// The commit this build is from (BuildCommitPlugin).\\nlet buildCommit = "%s"\\n' "$commit" > "$1.new"
            if cmp -s "$1.new" "$1"; then rm -f "$1.new"; else mv "$1.new" "$1"; fi
            """
        return [
            .buildCommand(
                displayName: "Recording the build's commit",
                executable: URL(filePath: "/bin/sh"),
                arguments: ["-c", script, root.path, file.path],
                inputFiles: Self.gitFiles(root: root) + Self.targetFiles(context.package),
                outputFiles: [file]
            )
        ]
    }

    /// The files of git's that a commit, a checkout or a staged edit changes, those that exist.
    static func gitFiles(root: URL) -> [URL] {
        var gitDirectory = root.appending(path: ".git")
        // A worktree's `.git` is a file naming its git directory.
        if let text = try? String(contentsOf: gitDirectory, encoding: .utf8), text.hasPrefix("gitdir: ") {
            let path = text.dropFirst("gitdir: ".count).trimmingCharacters(in: .whitespacesAndNewlines)
            gitDirectory = path.hasPrefix("/") ? URL(filePath: path) : root.appending(path: path)
        }
        var names = ["HEAD", "logs/HEAD", "index", "packed-refs"]
        if let head = try? String(contentsOf: gitDirectory.appending(path: "HEAD"), encoding: .utf8),
            head.hasPrefix("ref: ")
        {
            names.append(head.dropFirst("ref: ".count).trimmingCharacters(in: .whitespacesAndNewlines))
        }
        return names.map { gitDirectory.appending(path: $0) }
            .filter { FileManager.default.fileExists(atPath: $0.path) }
    }

    /// Every file of the package's own targets: an edit to any of them makes the build dirty.
    static func targetFiles(_ package: Package) -> [URL] {
        package.targets.compactMap { $0 as? SourceModuleTarget }.flatMap { $0.sourceFiles.map(\.url) }
    }
}
