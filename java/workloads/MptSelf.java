/**
 * Ground truth for a parameter tracing specification whose modifier calls the traced method
 * itself (`MptSelf.toString()String 0 instance_method:toString()String`): main calls toString
 * on 1,000 keys, 250 of each of "k0".."k3", so exactly 1,000 calls are the program's; the
 * agent's own calls of toString, made to read each call's value, are not. Prints "done".
 *
 * Usage: java MptSelf
 */
public class MptSelf {
    final int id;

    MptSelf(int id) {
        this.id = id;
    }

    @Override
    public String toString() {
        return "k" + (id % 4);
    }

    public static void main(String[] args) {
        int total = 0;
        for (int i = 0; i < 1000; i++) {
            total += new MptSelf(i).toString().length();
        }
        System.out.println("total=" + total + " done");
    }
}
