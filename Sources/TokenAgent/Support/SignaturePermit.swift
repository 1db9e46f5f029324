/// The signature permit a fetch holds while its provider runs, so that the provider can say when
/// the request that spends it leaves (``spend()``): the budget counts a signature in its window
/// from that moment, not from when the fetch took its place (a key-less issuer first waits for
/// the host's access token, which may take seconds). A provider that never spends it (a local
/// issuer, a fetch cancelled first) has it spent when the fetch ends.
public struct SignaturePermit: Sendable {
    /// The permit of the fetch running in this task, if its provider has a budget.
    @TaskLocal public static var current: SignaturePermit?

    let budget: SignatureBudget
    let ticket: FetchTicket

    /// The request this permit pays for leaves now. Again, or after the fetch ended: nothing.
    public func spend() { budget.sent(ticket) }

    /// A permit for one more request of the same fetch (a retry with a fresh access token),
    /// waited for at the same priority, for the same owner, as the first, until `deadline` (on the
    /// budget's clock) at most: then it throws ``SignatureBudget/DeadlinePassed``, and the fetch
    /// gives its lane place back rather than hold it for as long as the budget's queue takes.
    public func another(deadline: MonotonicInstant) async throws -> SignaturePermit {
        let ticket = FetchTicket(priority: ticket.priority, owner: ticket.owner)
        try await budget.permit(for: ticket, deadline: deadline)
        return SignaturePermit(budget: budget, ticket: ticket)
    }
}
