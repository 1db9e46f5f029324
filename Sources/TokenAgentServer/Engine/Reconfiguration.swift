import TokenAgent

/// Puts a reloaded configuration in force, in the one order that keeps every kind under the rules
/// of its own generation:
///
/// 1. the segments of kinds whose rules change are withheld (their readers must ask again);
/// 2. the new access rules, which know the new configuration's kinds, come into force: a kind
///    the engine does not serve yet is closed (`bad-kind`) until step 3, and a kind it is about
///    to forget is refused from now on;
/// 3. the engine takes the new providers and policy (new kinds are served, under rules already
///    in force);
/// 4. the withheld segments are offered again.
///
/// A kind whose provider and rules both change is closed from step 2 until the engine has
/// forgotten the old provider's tokens (then the final rules come into force): a peer the new rules
/// let in never gets a token the old provider made under the old rules.
///
/// Replies still owed when the rules change are checked again as they are written
/// (``RequestHandler``), so no step lets a token reach a peer the rules in force refuse.
public enum Reconfiguration {
    /// A step of ``apply(rules:providers:policy:changedKinds:rulesChanged:engine:access:segments:after:)``.
    public enum Step: Sendable, CaseIterable {
        case segmentsWithheld, rulesInForce, engineReconfigured, changedKindsOpened, segmentsOffered
    }

    /// Applies a reload; `after` runs after each step (tests look between them).
    public static func apply(
        rules: AccessRules,
        providers: [String: any TokenProvider],
        policy: RefreshPolicy,
        changedKinds: Set<String>,
        rulesChanged: Set<String>,
        engine: TokenEngine,
        access: AccessControl,
        segments: SharedSegments?,
        after: (Step) -> Void = { _ in }
    ) {
        segments?.reconfigure(
            kinds: Set(providers.keys),
            policy: policy,
            servingFloors: providers.compactMapValues(\.servingFloor),
            rulesChanged: rulesChanged
        )
        after(.segmentsWithheld)
        let closing = changedKinds.intersection(rulesChanged)
        if let kinds = rules.kinds, !closing.isEmpty {
            access.update(
                AccessRules(
                    allow: rules.allow,
                    admin: rules.admin,
                    agentUID: rules.agentUID,
                    trustRoot: rules.trustRoot,
                    kinds: Set(kinds).subtracting(closing)
                )
            )
        } else {
            access.update(rules)
        }
        after(.rulesInForce)
        engine.reconfigure(providers: providers, policy: policy, changedKinds: changedKinds)
        after(.engineReconfigured)
        if rules.kinds != nil, !closing.isEmpty { access.update(rules) }
        after(.changedKindsOpened)
        segments?.offer(rulesChanged)
        after(.segmentsOffered)
    }
}
