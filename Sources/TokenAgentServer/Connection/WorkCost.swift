/// What a request costs a connection's turn (``RequestHandler/workPerTurn``), in request lines
/// beside the one its line already cost: replies that walk the cache or render many counters
/// cost what they take, as measured against a cached GET, so a peer that pipelines them gets as
/// little of a turn's time as one that pipelines GETs.
enum WorkCost {
    /// `INFO`: one entry's fields.
    static let info = 1
    /// `STATS`: every counter, rendered as text. Measured on the release agent: about 7.8 µs of
    /// the loop's time a pipelined STATS (2,560,000 in 20 s from 16 flooders), against 1.3 µs a
    /// pipelined cached GET (docs/BENCHMARKS.md): six lines' worth, the line itself included.
    static let stats = 5
    /// `METRICS`: the whole exposition (a walk of the cache and every series): one per turn.
    static let metrics = RequestHandler.workPerTurn
    /// `WARM` and `TOUCH`: each id they name is a cache decision, as a GET is.
    static let perID = 1
}
