/// A decoded event: one fix of one vehicle.
public struct LocationUpdate: Sendable, Equatable {
    public let vehicle: VehicleIdentity
    public let fix: LocationFix

    public init(vehicle: VehicleIdentity, fix: LocationFix) {
        self.vehicle = vehicle
        self.fix = fix
    }
}
