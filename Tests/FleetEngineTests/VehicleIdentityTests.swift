import FleetModel
import Testing

@Suite struct VehicleIdentityTests {
    /// Ids that differ in a byte, in length, by kind, or only in how their text is stored (a
    /// small string and a heap one, a composed and a decomposed accent, which `String`
    /// counts equal).
    static let ids = ["veh-00001", "veh-00002", "veh-0001", "veh-000001", "", "vehicle-with-a-long-identifier-0001",
                      "vehicle-with-a-long-identifier-0002", "caf\u{E9}", "cafe\u{301}", "\u{1F697}-7"]

    /// Two identities are equal exactly when kind and id are, and equal ones hash alike,
    /// whichever way the id was made: the relay's tables are keyed by them.
    @Test func identitiesAreEqualExactlyWhenKindAndIdAre() {
        let identities = VehicleKind.allCases.flatMap { kind in
            Self.ids.map { VehicleIdentity(kind: kind, id: $0) }
                + Self.ids.map { VehicleIdentity(kind: kind, id: String(decoding: Array($0.utf8), as: UTF8.self)) }
        }
        for left in identities {
            for right in identities {
                let same = left.kind == right.kind && left.id == right.id
                #expect((left == right) == same, "\(left) and \(right)")
                if same { #expect(left.hashValue == right.hashValue, "\(left) and \(right)") }
            }
        }
    }
}
