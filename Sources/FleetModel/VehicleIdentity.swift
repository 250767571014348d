// The domain's nouns, shared by the core, the input formats, the signers and the Fleet Engine
// client: which vehicle, where it was, and when.

/// Fleet Engine's two kinds of vehicle, which have different endpoints and token claims.
public enum VehicleKind: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// On-demand rides and deliveries.
    case vehicle
    /// Last-mile (scheduled) deliveries.
    case deliveryVehicle = "delivery_vehicle"

    public var description: String { rawValue }
}

/// One vehicle as Fleet Engine addresses it.
///
/// Its hash is computed once, when the identity is made: a request looks its vehicle up four
/// or five times (its lane as the record comes in and when it is taken, its token, its answer),
/// and the tables of a large fleet probe past other vehicles' entries, each of which an
/// equality check would otherwise compare string by string.
public struct VehicleIdentity: Hashable, Sendable, CustomStringConvertible {
    public let kind: VehicleKind
    public let id: String
    private let hashCode: Int

    public init(kind: VehicleKind, id: String) {
        self.kind = kind
        self.id = id
        var hasher = Hasher()
        hasher.combine(kind)
        hasher.combine(id)
        hashCode = hasher.finalize()
    }

    public var description: String { "\(kind)/\(id)" }

    /// Different hashes settle most comparisons without reading either string.
    public static func == (left: VehicleIdentity, right: VehicleIdentity) -> Bool {
        left.hashCode == right.hashCode && left.kind == right.kind && left.id == right.id
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(hashCode)
    }
}
