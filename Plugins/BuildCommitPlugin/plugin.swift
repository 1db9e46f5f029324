import Foundation
import PackagePlugin

/// Writes `BuildCommit.swift` into the target before every build: the commit the package is
/// built from (`git rev-parse --short=12 HEAD`, `-dirty` when a tracked file differs from it), or
/// `unknown` outside a git checkout. A prebuild command, so it runs at every build and follows
/// the checkout (a manifest value would be cached with the manifest); the file is replaced only
/// when its text changes, so an unchanged commit rebuilds nothing.
@main
struct BuildCommitPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let output = context.pluginWorkDirectoryURL.appending(path: "Generated")
        let root = context.package.directoryURL.path
        let file = output.appending(path: "BuildCommit.swift").path
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
            .prebuildCommand(
                displayName: "Recording the build's commit",
                executable: URL(filePath: "/bin/sh"),
                arguments: ["-c", script, root, file],
                outputFilesDirectory: output
            )
        ]
    }
}
