/// What a request costs a connection's turn (``RequestHandler/workPerTurn``), in request lines
/// beside the one its line already cost: replies that walk the cache or render many counters
/// cost what they take, as measured against a cached GET, so a peer that pipelines them gets as
/// little of a turn's time as one that pipelines GETs.
enum WorkCost {
    /// `INFO`: one entry's fields.
    static let info = 1
    /// `STATS`: every counter, rendered as text. Measured on the release agent with one peer
    /// pipelining 4,096 at a time: 3.5 to 4.0 µs of the agent's CPU a `STATS`, against 0.45 to
    /// 0.49 µs a cached GET pipelined the same way: eight lines' worth, the line itself included.
    static let stats = 7
    /// `METRICS`: the whole exposition (a walk of the cache and every series): one per turn.
    static let metrics = RequestHandler.workPerTurn
    /// `WARM` and `TOUCH`: each id they name is a cache decision, as a GET is.
    static let perID = 1
}
