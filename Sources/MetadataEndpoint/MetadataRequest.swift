/// An HTTP request as the router sees it: no I/O, no NIO types.
public struct MetadataRequest: Sendable {
    /// The method, as sent (`GET`, `HEAD`, ...).
    public var method: String
    /// The request target, as sent (`/computeMetadata/v1/project/project-id`, `/x?y=z`).
    public var target: String
    /// The header fields, in order, names as sent.
    public var headers: [(name: String, value: String)]

    /// A request.
    public init(method: String, target: String, headers: [(name: String, value: String)]) {
        self.method = method
        self.target = target
        self.headers = headers
    }

    /// The values of header `name` (any case), in order.
    public func values(of name: String) -> [String] {
        headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }
}
