import JSON

/// Reads the time of a vehicle's current location from Fleet Engine's vehicle JSON.
public enum LiveLocation {
    /// The newest of `lastLocation.supplementalLocationTime` and `lastLocation.updateTime`,
    /// or nil when the vehicle has no location yet.
    public static func milliseconds(fromVehicleBody body: String) -> Int64? {
        guard let lastLocation = (try? JSONParser.parse(body))?["lastLocation"] else { return nil }
        return ["supplementalLocationTime", "updateTime"]
            .compactMap { lastLocation[$0]?.stringValue.flatMap(RFC3339.parseMilliseconds) }
            .max()
    }
}
