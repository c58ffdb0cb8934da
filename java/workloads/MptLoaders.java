/**
 * Ground truth for telling apart classes of the same name from different class loaders: two
 * URLClassLoaders (parent: the platform loader, so neither delegates to the application's) each
 * define their own MptTwin from this program's class path. The first one's applyAsInt is called
 * twice with 1, the second one's three times with 2.
 */
import java.net.URL;
import java.net.URLClassLoader;
import java.util.function.IntUnaryOperator;

public class MptLoaders {
    public static void main(String[] args) throws Exception {
        URL here = MptLoaders.class.getProtectionDomain().getCodeSource().getLocation();
        int total = 0;
        int[][] plan = {{1, 2}, {2, 3}};
        for (int[] step : plan) {
            ClassLoader loader = new URLClassLoader(new URL[] {here}, ClassLoader.getPlatformClassLoader());
            IntUnaryOperator twin = (IntUnaryOperator) loader.loadClass("MptTwin")
                    .getDeclaredConstructor().newInstance();
            for (int call = 0; call < step[1]; call++) {
                total += twin.applyAsInt(step[0]);
            }
        }
        System.out.println("total=" + total);
        System.out.println("done");
    }
}
